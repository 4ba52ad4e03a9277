"""OpenAICompatible against a scripted OpenAI-style server on loopback: mapping and fallbacks."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from closedloop import (
    ConfigurationError,
    ContextOverflowError,
    ModelAuthError,
    ModelNotAvailableError,
    ModelRateLimitError,
    ModelResponseError,
    ModelTimeoutError,
    ModelUnreachableError,
    TransientModelError,
)
from closedloop.models import ModelRequest, OpenAICompatible, Price, usage_scope
from closedloop.models._openai import _retry_after

from .conftest import WEATHER_SCHEMA, FakeOpenAI, free_port

pytestmark = pytest.mark.real_model  # a real HTTP server, though not a real model

TRUTH = {"tool": "get_weather", "city": "上海"}


@pytest.fixture
async def adapter_factory(fake_openai: FakeOpenAI) -> AsyncIterator[type]:
    made: list[OpenAICompatible] = []

    class Factory:
        def __new__(cls, model: str, **kw: object) -> OpenAICompatible:  # type: ignore[misc]
            adapter = OpenAICompatible(fake_openai.base_url, model, api_key="k", **kw)  # type: ignore[arg-type]
            made.append(adapter)
            return adapter

    yield Factory
    for adapter in made:
        await adapter.aclose()


async def test_plain_call_maps_text_usage_and_sends_the_arguments(
    adapter_factory: type, fake_openai: FakeOpenAI
) -> None:
    model = adapter_factory("ok", price=Price(1.0, 2.0))
    with usage_scope() as run:
        out = await model.complete(
            [{"role": "user", "content": "hi"}],
            ModelRequest(max_tokens=12, temperature=0.3, seed=5, stop=["\n"]),
        )
    sent = fake_openai.requests[-1]
    assert (sent["max_tokens"], sent["temperature"], sent["seed"], sent["stop"]) == (
        12,
        0.3,
        5,
        ["\n"],
    )
    assert sent["_auth"] == "Bearer k"
    assert "response_format" not in sent
    assert out.usage.prompt_tokens == 11 and out.usage.completion_tokens == 7
    assert out.cost_usd == pytest.approx((11 * 1.0 + 7 * 2.0) / 1e6)
    assert run.total.calls == 1


async def test_json_schema_response_format_is_used_when_supported(
    adapter_factory: type, fake_openai: FakeOpenAI
) -> None:
    model = adapter_factory("ok")
    out = await model.complete("上海天气", ModelRequest(response_schema=WEATHER_SCHEMA))
    fmt = fake_openai.requests[-1]["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["schema"] == WEATHER_SCHEMA
    assert out.parsed == TRUTH and model.structured_output == "json_schema"


async def test_falls_back_to_json_object_with_schema_when_json_schema_is_rejected(
    adapter_factory: type, fake_openai: FakeOpenAI
) -> None:
    model = adapter_factory("noschema")
    out = await model.complete("上海天气", ModelRequest(response_schema=WEATHER_SCHEMA))
    assert out.parsed == TRUTH
    assert model.structured_output == "json_object_schema"
    tried = [r["response_format"]["type"] for r in fake_openai.requests[-2:]]
    assert tried == ["json_schema", "json_object"]
    assert fake_openai.requests[-1]["response_format"]["schema"] == WEATHER_SCHEMA
    assert "JSON Schema" in fake_openai.requests[-1]["messages"][0]["content"]
    await model.complete(
        "again", ModelRequest(response_schema=WEATHER_SCHEMA)
    )  # remembered: one request
    assert fake_openai.requests[-1]["response_format"]["type"] == "json_object"
    assert fake_openai.requests[-2]["response_format"]["type"] == "json_object"


async def test_falls_back_to_prompt_only_and_sanitises_the_reply(
    adapter_factory: type, fake_openai: FakeOpenAI
) -> None:
    model = adapter_factory("nojson")
    out = await model.complete(
        [{"role": "user", "content": "上海天气"}], ModelRequest(response_schema=WEATHER_SCHEMA)
    )
    assert model.structured_output == "prompt"
    assert out.text.startswith("Sure:")  # prose and a code fence around the JSON ...
    assert out.parsed == TRUTH  # ... dug out and validated
    assert "response_format" not in fake_openai.requests[-1]


async def test_a_fixed_structured_output_mode_does_not_step_down(adapter_factory: type) -> None:
    model = adapter_factory("noschema", structured_output="json_schema")
    with pytest.raises(ModelResponseError, match="422"):
        await model.complete("x", ModelRequest(response_schema=WEATHER_SCHEMA))


async def test_tools_are_passed_through_and_tool_calls_come_back(
    adapter_factory: type, fake_openai: FakeOpenAI
) -> None:
    tool = {
        "type": "function",
        "function": {"name": "get_weather", "parameters": {"type": "object"}},
    }
    out = await adapter_factory("tools").complete("上海天气", ModelRequest(tools=[tool]))
    assert fake_openai.requests[-1]["tools"] == [tool]
    assert out.text == ""
    assert [(c.name, c.arguments) for c in out.tool_calls] == [("get_weather", '{"city": "上海"}')]


async def test_tool_choice_is_auto_with_tools_and_absent_without(
    adapter_factory: type, fake_openai: FakeOpenAI
) -> None:
    # llama-cpp-python's server reads a missing tool_choice as "none" and ignores the tools.
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    await adapter_factory("tools").complete("x", ModelRequest(tools=[tool]))
    assert fake_openai.requests[-1]["tool_choice"] == "auto"
    await adapter_factory("plain").complete("x")
    assert "tool_choice" not in fake_openai.requests[-1]


@pytest.mark.parametrize(
    ("model", "error", "fragment"),
    [
        ("auth401", ModelAuthError, "credentials were refused"),
        ("forbidden403", ModelAuthError, "403"),
        ("overflow400", ContextOverflowError, "context window"),
        ("notfound404", ModelNotAvailableError, "no such model 'notfound404'"),
        ("boom500", TransientModelError, "503"),
        ("bad400", ModelResponseError, "temperature is odd"),
        ("empty", ModelResponseError, "no choices"),
    ],
)
async def test_server_errors_become_typed_errors(
    adapter_factory: type, model: str, error: type[Exception], fragment: str
) -> None:
    adapter = adapter_factory(model)
    with pytest.raises(error, match=fragment):
        await adapter.complete("x")
    assert adapter.usage.total.errors == 1


@pytest.mark.parametrize(("model", "seconds"), [("ratelimit429", 7.0), ("ratelimit429ms", 1.5)])
async def test_rate_limits_carry_retry_after(
    adapter_factory: type, model: str, seconds: float
) -> None:
    with pytest.raises(ModelRateLimitError) as info:
        await adapter_factory(model).complete("x")
    assert info.value.retry_after == seconds


def test_retry_after_header_forms() -> None:
    assert _retry_after({"retry-after": "2.5"}) == 2.5
    assert _retry_after({"retry-after-ms": "250"}) == 0.25
    assert (
        _retry_after({"retry-after": "Wed, 21 Oct 2015 07:28:10 GMT"}, now=lambda: 1445412480.0)
        == 10.0
    )
    assert _retry_after({"retry-after": "soon"}) is None
    assert _retry_after({}) is None


async def test_connection_refused_is_unreachable() -> None:
    model = OpenAICompatible(f"http://127.0.0.1:{free_port()}/v1", "m")
    with pytest.raises(ModelUnreachableError, match="is the server running"):
        await model.complete("x")
    await model.aclose()


@pytest.mark.integration
async def test_a_slow_server_times_out(adapter_factory: type) -> None:
    with pytest.raises(ModelTimeoutError, match=r"0\.3s"):
        await adapter_factory("slow").complete("x", ModelRequest(timeout=0.3))


def test_constructor_checks() -> None:
    with pytest.raises(ConfigurationError, match="structured_output"):
        OpenAICompatible("http://127.0.0.1:1/v1", "m", structured_output="yaml")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="model"):
        OpenAICompatible("http://127.0.0.1:1/v1", "")
    with pytest.raises(ConfigurationError, match="timeout"):
        OpenAICompatible("http://127.0.0.1:1/v1", "m", timeout=0)


def test_one_model_serves_one_event_loop_after_another(fake_openai: FakeOpenAI) -> None:
    # Each run_sync is a fresh asyncio.run: pooled connections of the first loop are dead
    # in the second, so the adapter must open new ones rather than fail "loop is closed".
    model = OpenAICompatible(fake_openai.base_url, "plain", api_key="k")
    texts = [asyncio.run(model.complete("x")).text for _ in range(3)]
    assert texts == [texts[0]] * 3 and texts[0]
    asyncio.run(model.aclose())  # the last loop is closed: nothing left to close, no error
    assert model.usage.total.calls == 3
