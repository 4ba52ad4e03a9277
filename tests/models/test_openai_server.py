"""An agent run end to end through a real OpenAI-compatible server: llama-cpp-python's.

``python -m llama_cpp.server`` serves the embedded SmolLM2 on loopback with the
``chatml-function-calling`` chat format (SmolLM2 speaks ChatML), so one server takes both
kinds of request the adapter sends: native tool calls (``tools`` with ``tool_choice``) and a
JSON answer under ``response_format``, which the server compiles to a grammar. The model is
weak: the tests assert what the loop and the adapter guarantee (the request carried the
tools or the schema, the tool only ever ran with arguments valid under its schema, the run
ended with a named halt and its usage counted), never that SmolLM2 answered well.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from closedloop import Agent, Runtime
from closedloop.agent import (
    ActionCall,
    ControlConfig,
    HaltReason,
    ModelSettings,
    RunLimits,
    RunResult,
    as_tool,
)
from closedloop.control import Strictness
from closedloop.models import (
    DEFAULT_REQUEST,
    Completion,
    MessagesInput,
    ModelRequest,
    OpenAICompatible,
    WrapperModel,
    load_model,
)
from closedloop.perception import Observation

from .conftest import LlamaServer, start_llama_server, stop_llama_server

pytestmark = [pytest.mark.integration, pytest.mark.real_model]

API_KEY = "from-the-environment"
TASK = "What is the weather in Paris? Call get_weather."
# Generous for a loaded machine (llama.cpp runs about ten times slower there), but bounded.
CALL_TIMEOUT_S = 120.0
LIMITS = RunLimits(max_steps=3, deadline_s=360.0)


class Recorder(WrapperModel):
    """Keeps each request the agent made and the completion it got back."""

    def __init__(self, inner: OpenAICompatible) -> None:
        super().__init__(inner)
        self.adapter = inner
        self.calls: list[tuple[ModelRequest, Completion]] = []

    async def complete(
        self, messages: MessagesInput, request: ModelRequest = DEFAULT_REQUEST
    ) -> Completion:
        completion = await self.inner.complete(messages, request)
        self.calls.append((request, completion))
        return completion


class Weather:
    """The one tool: records every call it receives."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []

    def get_weather(self, city: str) -> str:
        """Today's weather in a city."""
        self.received.append({"city": city})
        return f"sunny and 21 C in {city}"


def weather_answered(call: ActionCall, observation: Observation) -> bool:
    # The task is done once the tool has answered: the run ends there, one call or two.
    return call.tool == "get_weather" and observation.status == "ok"


@pytest.fixture(scope="module")
def server(smollm2_path: Path) -> Iterator[LlamaServer]:
    started = start_llama_server(
        smollm2_path,
        api_key=API_KEY,
        n_ctx=2048,
        n_threads=1,
        chat_format="chatml-function-calling",
        ready_s=120.0,
    )
    try:
        yield started
    finally:
        stop_llama_server(started.process)


@pytest.fixture
def spec(server: LlamaServer, monkeypatch: pytest.MonkeyPatch) -> str:
    # The key comes from the environment, as a user's would.
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    return f"openai-compatible:{server.base_url}#smollm2"


def run_agent(
    spec: str, settings: ModelSettings, control: ControlConfig
) -> tuple[RunResult, Recorder, Weather]:
    adapter = load_model(spec, timeout=CALL_TIMEOUT_S)
    assert isinstance(adapter, OpenAICompatible)
    model, weather = Recorder(adapter), Weather()
    agent = Agent(
        model,
        tools=[weather.get_weather],
        model_settings=settings,
        limits=LIMITS,
        control=control,
        runtime=Runtime(trace=False),
    )
    try:
        result = agent.run_sync(TASK)
    finally:
        adapter_close(adapter)
    return result, model, weather


def adapter_close(adapter: OpenAICompatible) -> None:
    asyncio.run(adapter.aclose())


def assert_ended_cleanly(result: RunResult, model: Recorder, weather: Weather) -> None:
    # No adapter failure: an exception inside the run would end it as ``error``.
    assert result.error is None, result.error
    assert result.halt_reason in set(HaltReason) - {HaltReason.ERROR}, result.message
    if result.halt_reason is HaltReason.FINAL:
        assert isinstance(result.answer, str) and result.answer.strip()
    # Usage counted by the run and by the adapter's own meter, call for call.
    assert result.usage.model_calls == len(model.calls) > 0
    assert result.usage.prompt_tokens > 0
    meter = model.adapter.usage
    assert meter is not None and meter.total.calls == len(model.calls)
    # The validator stands between the model and the tool: whatever SmolLM2 proposed, the
    # tool only ran with arguments its own schema accepts.
    schema = as_tool(weather.get_weather).parameters
    for arguments in weather.received:
        jsonschema.validate(arguments, schema)


def test_native_tool_calls_through_the_server(spec: str) -> None:
    # The spec alone picks native tool calling: an OpenAI-compatible server takes tools.
    assert Agent(spec, runtime=Runtime(trace=False)).settings.native
    result, model, weather = run_agent(
        spec,
        ModelSettings(tool_calling="native", max_tokens=48),
        ControlConfig(completion_predicate=weather_answered),
    )
    assert_ended_cleanly(result, model, weather)
    for request, _ in model.calls:
        names = {t["function"]["name"] for t in request.tools}
        assert {"get_weather", "final_answer"} <= names and request.response_schema is None
    # The server's function-calling grammar answers with a native call (a tool or the
    # final answer) or a message; every action the steps took came from a native call.
    native = [c for _, completion in model.calls for c in completion.tool_calls]
    assert native, [completion.text for _, completion in model.calls]
    acted = {s.action.tool for s in result.steps if s.action is not None}
    assert acted <= {c.name for c in native}


def test_response_format_through_the_server(spec: str) -> None:
    result, model, weather = run_agent(
        spec,
        ModelSettings(tool_calling="json", max_tokens=96),
        # The first proposal is decoded under the action schema (the strict rung).
        ControlConfig(strictness_prior=Strictness.STRICT, completion_predicate=weather_answered),
    )
    assert_ended_cleanly(result, model, weather)
    assert all(not request.tools for request, _ in model.calls)
    first_request, first = model.calls[0]
    assert first_request.response_schema is not None
    # llama-cpp-python refuses the json_schema form; the adapter stepped down to
    # json_object with the schema, which the server turns into a grammar.
    assert model.adapter.structured_output == "json_object_schema"
    # Under the grammar the reply parses and validates against the action schema.
    assert first.parse_error is None and isinstance(first.parsed, dict), first.text
    jsonschema.validate(first.parsed, dict(first_request.response_schema))


def test_a_server_that_cannot_start_fails_with_its_stderr(tmp_path: Path) -> None:
    with pytest.raises(pytest.fail.Exception, match="stderr") as failed:
        start_llama_server(tmp_path / "missing.gguf", n_threads=1, ready_s=60.0)
    assert "exited with status" in str(failed.value)
    assert "missing.gguf" in str(failed.value)
