"""End to end on the real local model (Qwen2.5-Coder-0.5B) with a real HTTP tool on loopback."""

from __future__ import annotations

from pathlib import Path

import pytest

from closedloop import ModelNotAvailableError
from closedloop.agent import (
    Agent,
    ControlConfig,
    HaltReason,
    ModelSettings,
    RequiredField,
    RunLimits,
    Runtime,
    Task,
    as_tool,
    read_trace,
)
from closedloop.control import ActuatorSchedule, schedule_strictness
from closedloop.models import Model, load_model
from closedloop.perception import HttpTool

from .conftest import Service

pytestmark = [pytest.mark.integration, pytest.mark.real_model]

MODEL = "qwen2.5-coder-0.5b"


def _model(threads: int) -> Model:
    try:
        return load_model(f"local:{MODEL}", n_ctx=2048, n_threads=threads)
    except ModelNotAvailableError as exc:
        pytest.fail(f"{exc}. Fetch it first: `closedloop models pull {MODEL}`")


async def test_the_loop_runs_a_real_model_against_a_real_http_tool(
    fresh_service: Service, tmp_path: Path, llama_threads: int
) -> None:
    model = _model(llama_threads)
    http = HttpTool(
        "weather",
        "GET",
        fresh_service.base_url + "/weather/{city}",
        key_fields=("temperature_c",),
        timeout_s=10.0,
    )
    weather = as_tool(
        http,
        description="Current temperature in a city, in degrees Celsius.",
        fills={"temperature_c": "temperature_c"},
    )
    # Strict from the first step: the small model decodes under the action grammar.
    control = ControlConfig(schedule=ActuatorSchedule(strictness=schedule_strictness(0.0)))
    agent = Agent(
        model,
        [weather],
        control=control,
        limits=RunLimits(max_steps=3, deadline_s=400),
        model_settings=ModelSettings(max_tokens=48),
        runtime=Runtime(trace_dir=tmp_path),
    )
    task = Task(
        prompt="What is the temperature in Paris right now?",
        required_fields=[
            RequiredField(name="temperature_c", schema={"type": "number"}, source="weather")
        ],
    )
    try:
        result = await agent.run(task)
    finally:
        await http.aclose()

    assert result.halt_reason in set(HaltReason) and result.steps, result.message
    first = result.steps[0]
    assert first.actuators["constrained_decoding"] is True
    assert first.usage.model_calls == 1 and first.usage.completion_tokens > 0
    # Under the grammar every reply is an action of the schema: never unparseable JSON.
    assert not any("not a JSON action" in e for r in result.steps for e in r.validation_errors)
    # The model used the tool; the service on 127.0.0.1 answered and the answer filled
    # the field that only the tool may fill.
    assert fresh_service.calls.get("weather", 0) >= 1, [r.action for r in result.steps]
    called = [r for r in result.steps if r.observation is not None]
    assert called and called[0].observation is not None
    assert called[0].observation["status"] == "ok"
    assert result.fields["temperature_c"] == 18.5
    if result.success:
        assert result.halt_reason is HaltReason.FINAL
    else:
        assert result.halt_reason is not HaltReason.FINAL
    records, stored = read_trace(Path(result.trace_path or ""))
    assert [r.step for r in records] == [r.step for r in result.steps]
    assert stored is not None and stored.halt_reason is result.halt_reason
