"""FunctionModel, ScriptedModel and the shared ModelBase behaviour they exercise."""

from __future__ import annotations

import json
from typing import Any

import pytest

from closedloop import ConfigurationError, ModelResponseError, TransientModelError
from closedloop.models import (
    CallInfo,
    Completion,
    FunctionModel,
    Message,
    Model,
    ModelRequest,
    RawCompletion,
    ScriptedModel,
    SyncModel,
    complete_sync,
    normalize_messages,
)

from .conftest import WEATHER_SCHEMA


def echo(messages: tuple[Message, ...], call: CallInfo) -> str:
    return messages[-1].content.upper()


async def test_function_model_answers_from_messages_and_call_info() -> None:
    seen: list[CallInfo] = []

    def fn(messages: tuple[Message, ...], call: CallInfo) -> str:
        seen.append(call)
        return f"{len(messages)}:{messages[-1].content}:{call.max_tokens}:{call.seed}"

    model = FunctionModel(fn, name="fn")
    out = await model.complete(
        [{"role": "system", "content": "s"}, Message(role="user", content="hi")],
        ModelRequest(max_tokens=9, seed=3, stop="END"),
    )
    assert out.text == "2:hi:9:3"
    assert out.model == "fn"
    assert out.finish_reason == "stop"
    assert seen[0].stop == ("END",)
    assert seen[0].call_id == out.call_id
    assert out.usage.completion_tokens > 0 and out.usage.prompt_tokens > 0
    assert model.calls == seen


async def test_function_model_accepts_async_functions_and_json_values() -> None:
    async def fn(messages: tuple[Message, ...], call: CallInfo) -> Any:
        return {"tool": "get_weather", "city": "上海"}

    out = await FunctionModel(fn).complete("上海天气", ModelRequest(response_schema=WEATHER_SCHEMA))
    assert out.parsed == {"tool": "get_weather", "city": "上海"}
    assert out.parse_error is None
    assert json.loads(out.text) == out.parsed


async def test_function_model_passes_a_completion_through_with_the_call_id() -> None:
    ready = Completion(text="done", model="m", call_id="ignored", finish_reason="length")
    out = await FunctionModel(lambda m, c: ready).complete("x", ModelRequest(call_id="c-1"))
    assert out.text == "done"
    assert out.finish_reason == "length"
    assert out.call_id == "c-1"


async def test_schema_mismatch_is_reported_not_raised() -> None:
    model = FunctionModel(lambda m, c: '{"tool": "get_weather"}')
    out = await model.complete("q", ModelRequest(response_schema=WEATHER_SCHEMA))
    assert out.parsed is None
    assert out.parse_error is not None and "city" in out.parse_error


async def test_prose_around_json_is_a_parse_error_in_strict_mode() -> None:
    model = FunctionModel(lambda m, c: 'Sure! {"tool": "get_weather", "city": "上海"}')
    out = await model.complete("q", ModelRequest(response_schema=WEATHER_SCHEMA))
    assert out.parsed is None
    assert out.parse_error is not None and "not valid JSON" in out.parse_error


async def test_without_a_schema_nothing_is_parsed() -> None:
    out = await FunctionModel(lambda m, c: '{"a": 1}').complete("q")
    assert out.parsed is None and out.parse_error is None


async def test_long_answers_are_cut_at_max_tokens_like_a_real_model() -> None:
    out = await FunctionModel(lambda m, c: "word " * 400).complete("q", ModelRequest(max_tokens=10))
    assert out.finish_reason == "length"
    assert out.usage.completion_tokens == 10
    assert len(out.text) <= 40


async def test_exceptions_from_the_function_propagate() -> None:
    def fn(messages: tuple[Message, ...], call: CallInfo) -> str:
        raise TransientModelError("flaky")

    model = FunctionModel(fn)
    with pytest.raises(TransientModelError, match="flaky"):
        await model.complete("q")
    assert model.usage.total.errors == 1
    assert model.usage.total.calls == 0


async def test_function_model_rejects_a_wrong_return_type() -> None:
    with pytest.raises(ModelResponseError, match="int"):
        await FunctionModel(lambda m, c: 42).complete("q")  # type: ignore[arg-type, return-value]


def test_function_model_needs_a_callable() -> None:
    with pytest.raises(ConfigurationError, match="fn"):
        FunctionModel("not callable")  # type: ignore[arg-type]


async def test_scripted_model_replays_in_order_then_runs_out() -> None:
    model = ScriptedModel(["one", {"k": 2}, RawCompletion(text="three", completion_tokens=1)])
    assert model.remaining == 3
    texts = [(await model.complete("q")).text for _ in range(3)]
    assert texts == ["one", '{"k": 2}', "three"]
    assert model.remaining == 0
    with pytest.raises(ModelResponseError, match="exhausted after 3"):
        await model.complete("q")
    assert len(model.calls) == 4


async def test_scripted_model_raises_scripted_exceptions_and_cycles() -> None:
    model = ScriptedModel([TransientModelError("503"), "ok"], cycle=True)
    results: list[str] = []
    for _ in range(4):
        try:
            results.append((await model.complete("q")).text)
        except TransientModelError:
            results.append("error")
    assert results == ["error", "ok", "error", "ok"]


def test_scripted_model_argument_checks() -> None:
    with pytest.raises(ConfigurationError, match="answers"):
        ScriptedModel("abc")
    with pytest.raises(ConfigurationError, match="answers"):
        ScriptedModel([], cycle=True)


def test_test_models_satisfy_the_protocol() -> None:
    assert isinstance(FunctionModel(echo), Model)
    assert isinstance(ScriptedModel([]), Model)


@pytest.mark.parametrize(
    ("messages", "argument"),
    [
        ([], "messages"),
        ({"role": "user", "content": "x"}, "messages"),
        ([{"role": "robot", "content": "x"}], "messages[0]"),
        ([{"role": "user"}], "messages[0]"),
        ([{"role": "user", "content": "a"}, 7], "messages[1]"),
        ([{"role": "user", "content": "a", "extra": 1}], "messages[0]"),
    ],
)
def test_bad_messages_name_the_offending_index(messages: Any, argument: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        normalize_messages(messages)
    assert info.value.argument == argument


def test_a_plain_string_is_one_user_message() -> None:
    assert normalize_messages("hello") == (Message(role="user", content="hello"),)


def test_sync_wrappers_block_until_the_answer() -> None:
    model = FunctionModel(echo)
    assert complete_sync(model, "abc").text == "ABC"
    sync = SyncModel(model)
    assert sync.name == "function"
    assert sync.complete_sync("xyz", ModelRequest(max_tokens=5)).text == "XYZ"
    assert len(model.calls) == 2


async def test_sync_wrapper_works_inside_a_running_loop() -> None:
    # A sync call from async code must not deadlock the caller's loop.
    assert complete_sync(FunctionModel(echo), "inside").text == "INSIDE"


def test_latency_comes_from_the_injected_clock() -> None:
    ticks = iter([10.0, 10.25])
    model = FunctionModel(echo, clock=lambda: next(ticks))
    assert complete_sync(model, "x").latency_s == pytest.approx(0.25)
