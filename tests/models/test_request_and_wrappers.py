"""ModelRequest (one checked value per call) and WrapperModel (forwarding by default)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from closedloop import ConfigurationError
from closedloop.models import (
    DEFAULT_REQUEST,
    CallInfo,
    Completion,
    FaultInjectingModel,
    FunctionModel,
    Message,
    MessagesInput,
    MeteredModel,
    Model,
    ModelRequest,
    OpenAICompatible,
    ScriptedModel,
    SyncModel,
    UsageMeter,
    WrapperModel,
    complete_sync,
)


def echo(messages: tuple[Message, ...], call: CallInfo) -> str:
    return messages[-1].content.upper()


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_tokens": 2.5}, "max_tokens"),
        ({"max_tokens": True}, "max_tokens"),
        ({"temperature": -0.1}, "temperature"),
        ({"temperature": float("nan")}, "temperature"),
        ({"temperature": 2.5}, "temperature"),
        ({"temperature": "hot"}, "temperature"),
        ({"seed": -1}, "seed"),
        ({"seed": 2**32}, "seed"),
        ({"seed": 1.5}, "seed"),
        ({"timeout": 0}, "timeout"),
        ({"timeout": float("inf")}, "timeout"),
        ({"stop": [""]}, "stop"),
        ({"stop": 5}, "stop"),
        ({"tools": {"type": "function"}}, "tools"),
        ({"tools": ["not a dict"]}, "tools"),
        ({"call_id": ""}, "call_id"),
        ({"call_id": 7}, "call_id"),
        ({"response_schema": {"type": 5}}, "response_schema"),
        ({"response_schema": "object"}, "response_schema"),
        ({"response_schema": {"enum": [object()]}}, "response_schema"),
    ],
)
def test_a_bad_setting_fails_when_the_request_is_built_naming_field_and_value(
    kwargs: dict[str, Any], argument: str
) -> None:
    with pytest.raises(ConfigurationError) as info:
        ModelRequest(**kwargs)
    assert info.value.argument == argument
    ((_, value),) = kwargs.items()
    assert str(info.value).startswith(f"{argument}={value!r}")


def test_replace_checks_the_changed_field_too() -> None:
    request = ModelRequest(max_tokens=32)
    with pytest.raises(ConfigurationError) as info:
        request.replace(temperature=3.0)
    assert info.value.argument == "temperature"
    assert request.replace(seed=4) == ModelRequest(max_tokens=32, seed=4)


def test_the_request_is_frozen_keyword_only_and_normalised() -> None:
    request = ModelRequest(stop="END", tools=[{"type": "function"}], temperature=1, timeout=2)
    assert request.stop == ("END",)
    assert request.tools == ({"type": "function"},)
    assert isinstance(request.temperature, float) and isinstance(request.timeout, float)
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.max_tokens = 3  # type: ignore[misc]
    with pytest.raises(TypeError):
        ModelRequest(None)  # type: ignore[call-arg]
    assert ModelRequest() == DEFAULT_REQUEST
    assert (DEFAULT_REQUEST.max_tokens, DEFAULT_REQUEST.temperature) == (256, 0.0)


async def test_complete_refuses_anything_but_a_request() -> None:
    model = FunctionModel(echo)
    with pytest.raises(ConfigurationError) as info:
        await model.complete("q", {"max_tokens": 5})  # type: ignore[arg-type]
    assert info.value.argument == "request"
    assert model.calls == []


async def test_the_adapter_sees_the_request_it_was_given() -> None:
    model = FunctionModel(echo)
    request = ModelRequest(max_tokens=7, seed=2, stop=["\n"], call_id="c-9")
    out = await model.complete("hi", request)
    (call,) = model.calls
    assert call.request is request
    assert (call.max_tokens, call.seed, call.stop, call.call_id) == (7, 2, ("\n",), "c-9")
    assert out.call_id == "c-9"


class Tagging(WrapperModel):
    """Overrides complete alone: everything else must come from WrapperModel."""

    async def complete(
        self, messages: MessagesInput, request: ModelRequest = DEFAULT_REQUEST
    ) -> Completion:
        out = await self.inner.complete(messages, request.replace(max_tokens=request.max_tokens))
        return out.model_copy(update={"text": f"[{out.text}]"})


class Closable(FunctionModel):
    def __init__(self) -> None:
        super().__init__(echo, name="closable")
        self.closed = 0

    @property
    def supports_tool_calls(self) -> bool:
        return True

    async def aclose(self) -> None:
        self.closed += 1


async def test_a_subclass_overriding_complete_forwards_everything_else() -> None:
    meter = UsageMeter()
    inner = FunctionModel(echo, name="inner", meter=meter)
    wrapped = Tagging(inner)
    assert isinstance(wrapped, Model)
    assert wrapped.name == "inner"
    assert wrapped.usage is meter
    assert wrapped.supports_tool_calls is False
    assert wrapped.innermost is inner
    assert repr(wrapped) == "Tagging(FunctionModel('inner'))"
    out = await wrapped.complete("abc", ModelRequest(call_id="x1"))
    assert (out.text, out.call_id) == ("[ABC]", "x1")
    assert meter.total.calls == 1

    closable = Closable()
    chain = Tagging(Tagging(closable), name="outer")
    assert chain.name == "outer"
    assert chain.supports_tool_calls is True
    assert chain.innermost is closable
    await chain.aclose()
    assert closable.closed == 1


async def test_a_plain_wrapper_changes_nothing() -> None:
    inner = ScriptedModel(["one", "two"])
    wrapper = WrapperModel(inner)
    assert (await wrapper.complete("q")).text == "one"
    assert (await wrapper.complete("q", ModelRequest(max_tokens=3))).text == "two"
    assert [c.max_tokens for c in inner.calls] == [256, 3]


def test_a_wrapper_needs_a_model_and_a_real_name() -> None:
    with pytest.raises(ConfigurationError) as info:
        WrapperModel("not a model")  # type: ignore[arg-type]
    assert info.value.argument == "inner"
    with pytest.raises(ConfigurationError) as info:
        WrapperModel(FunctionModel(echo), name="")
    assert info.value.argument == "name"


def test_capabilities_travel_through_the_library_wrappers() -> None:
    adapter = OpenAICompatible("http://127.0.0.1:9/v1", "m", client=object())
    assert adapter.supports_tool_calls is True
    assert FunctionModel(echo).supports_tool_calls is False
    for wrapper in (
        FaultInjectingModel(adapter, "none"),
        MeteredModel(adapter),
        SyncModel(adapter),
    ):
        assert wrapper.supports_tool_calls is True
        assert wrapper.innermost is adapter


def test_the_sync_bridge_is_still_a_model_and_blocks_on_request() -> None:
    inner = FunctionModel(echo)
    sync = SyncModel(inner)
    assert isinstance(sync, Model)
    assert sync.complete_sync("xyz", ModelRequest(max_tokens=5)).text == "XYZ"
    assert complete_sync(sync, "abc").text == "ABC"
    assert [c.max_tokens for c in inner.calls] == [5, 256]
    sync.close()  # forwards to FunctionModel.aclose, which has nothing to release


class Listener:
    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []

    def model_call(
        self, model: str, latency_s: float, prompt_tokens: int, completion_tokens: int
    ) -> None:
        self.events.append(("ok", model, latency_s, prompt_tokens, completion_tokens))

    def model_error(self, model: str) -> None:
        self.events.append(("error", model))


async def test_the_metered_model_counts_tokens_and_keeps_both_clocks() -> None:
    ticks = iter([0.0, 0.5, 1.0, 3.0])
    ready = Completion(text="x", model="m", call_id="c", latency_s=0.2)
    inner = ScriptedModel([ready, RuntimeError("down")], name="inner")
    listener = Listener()
    metered = MeteredModel(inner, listener=listener, clock=lambda: next(ticks))
    await metered.complete("q")
    with pytest.raises(RuntimeError):
        await metered.complete("q")
    assert (metered.calls, metered.errors) == (1, 1)
    assert metered.charged_s == pytest.approx(0.2)  # what the completion says it cost
    assert metered.waited_s == pytest.approx(0.5 + 2.0)  # wall time, the failed call included
    assert listener.events[0][:2] == ("ok", "inner")
    assert listener.events[0][2] == pytest.approx(0.2)
    assert listener.events[1] == ("error", "inner")


@given(st.floats(allow_nan=True, allow_infinity=True), st.integers(-(2**40), 2**40))
def test_a_request_holds_exactly_the_settings_inside_their_limits(
    temperature: float, number: int
) -> None:
    for field, value, inside in (
        ("temperature", temperature, 0.0 <= temperature <= 2.0),
        ("max_tokens", number, number >= 1),
        ("seed", number, 0 <= number < 2**32),
    ):
        if inside:
            assert getattr(ModelRequest(**{field: value}), field) == value
        else:
            with pytest.raises(ConfigurationError) as info:
                ModelRequest(**{field: value})
            assert info.value.argument == field
