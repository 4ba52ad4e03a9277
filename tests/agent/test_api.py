"""The public surface: the first agent in three concepts, its option groups, typed results,
sync twins, resume by id, and every exception inside a run ending it as ``error``."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
from typing import Any

import pytest
from pydantic import BaseModel

import closedloop
import closedloop.agent as agent_pkg
from closedloop import ConfigurationError, StoreUnavailableError
from closedloop.agent import (
    DEFAULT_STOP,
    Agent,
    AgentResult,
    ContextSettings,
    ControlConfig,
    HaltReason,
    ModelSettings,
    PlanExecute,
    PlanReview,
    ReAct,
    ReadRetry,
    RunLimits,
    Runtime,
    run_agent,
    stop_after_steps,
    stop_on_no_progress,
    stop_on_repeats,
)
from closedloop.execution import AtomicAction
from closedloop.feedback import HandoverQueue, MemoryStore
from closedloop.models import CallInfo, FunctionModel, Message
from closedloop.perception import Observation

from .conftest import add, call, final, make_agent, scripted

TOP_LEVEL_LOOP_NAMES = {
    "Agent",
    "AgentResult",
    "HaltReason",
    "ModelSettings",
    "RunLimits",
    "RunResult",
    "run_agent",
    "stop_after_delay",
    "stop_after_steps",
    "stop_on_budget",
    "stop_on_no_progress",
    "stop_on_repeats",
    "tool",
}


def test_the_top_level_re_exports_the_loop_lazily() -> None:
    assert set(closedloop.__all__) >= TOP_LEVEL_LOOP_NAMES
    assert closedloop.__all__ == sorted(closedloop.__all__)
    for name in TOP_LEVEL_LOOP_NAMES:
        assert getattr(closedloop, name) is getattr(agent_pkg, name)
    assert not hasattr(closedloop, "run_agent_async")


def test_the_agent_package_exports_a_sorted_documented_surface() -> None:
    names = agent_pkg.__all__
    assert len(names) == len(set(names))
    assert sorted(names, key=lambda n: (not n.isupper(), not n[:1].isupper(), n)) == names
    for name in names:
        obj = getattr(agent_pkg, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            assert inspect.getdoc(obj), f"{name} has no docstring"
            assert obj.__module__ in ("closedloop.agent", "closedloop.policy"), name


# --- the first agent -----------------------------------------------------------------------


def test_the_first_agent_is_a_model_tools_and_a_task() -> None:
    from closedloop import Agent as TopAgent
    from closedloop import tool

    @tool
    def multiply(a: int, b: int) -> int:
        """Multiply two integers."""
        return a * b

    agent = TopAgent(scripted(call("multiply", a=6, b=7), final("42")), tools=[multiply])
    result = agent.run_sync("6*7?", trace=False)
    assert isinstance(result, AgentResult)
    assert result.halt_reason is HaltReason.FINAL and result.output == "42"
    assert result.error is None


def test_agent_takes_at_most_ten_parameters() -> None:
    parameters = inspect.signature(Agent.__init__).parameters
    positional = [p for p in parameters.values() if p.kind is p.POSITIONAL_OR_KEYWORD]
    keyword = [p for p in parameters.values() if p.kind is p.KEYWORD_ONLY]
    assert [p.name for p in positional] == ["self", "model", "tools"]
    assert len(positional) - 1 + len(keyword) <= 10
    assert RunLimits().stop is DEFAULT_STOP


def test_a_bad_runtime_or_limits_value_is_named() -> None:
    with pytest.raises(ConfigurationError, match="store"):
        Runtime(store="sqlite:///x.db")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="secrets"):
        Runtime(secrets="API_TOKEN")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="stop"):
        RunLimits(stop=3)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="read_retry"):
        ControlConfig(read_retry=True)  # type: ignore[arg-type]


def test_the_moved_options_reach_the_loop() -> None:
    store = MemoryStore()
    agent = Agent(
        scripted(final("4")),
        [add],
        limits=RunLimits(stop=None),
        control=ControlConfig(read_retry=ReadRetry(repeats_after_fault=5)),
        runtime=Runtime(store=store, trace=False),
    )
    assert agent.store is store and agent.trace is False
    assert agent.settings.read_retry.repeats_after_fault == 5
    assert agent.settings.stop == stop_after_steps(12)


@pytest.mark.parametrize(
    ("old", "where"),
    [
        ("store", "runtime=Runtime(store=...)"),
        ("stop", "limits=RunLimits(stop=...)"),
        ("read_retry", "control=ControlConfig(read_retry=...)"),
        ("max_steps", "limits=RunLimits(max_steps=...)"),
        ("temperature", "model_settings=ModelSettings(temperature=...)"),
    ],
)
def test_an_old_keyword_is_refused_with_its_new_place(old: str, where: str) -> None:
    with pytest.raises(TypeError) as raised:
        Agent(scripted(final("4")), [add], **{old: None})
    assert f"{old!r}, which has moved: pass {where}" in str(raised.value)


def test_every_moved_keyword_is_really_gone_from_the_agent() -> None:
    from closedloop.agent._moved import MOVED_KEYWORDS

    parameters = set(inspect.signature(Agent.__init__).parameters)
    assert parameters.isdisjoint(MOVED_KEYWORDS)
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        Agent(scripted(final("4")), [add], bogus=1)  # type: ignore[call-arg]


class Weather(BaseModel):
    city: str
    celsius: float


def test_output_type_parses_a_json_answer_into_the_type() -> None:
    model = scripted(final('{"city": "Paris", "celsius": 12.5}'))
    result = Agent(model, [add], output_type=Weather, runtime=Runtime(trace=False)).run_sync(
        "weather?"
    )
    assert result.success and result.output == Weather(city="Paris", celsius=12.5)
    assert type(result).__name__ == "AgentResult[Weather]"


def test_output_type_parses_a_plain_value() -> None:
    result = Agent(
        scripted(final("3")), [add], output_type=int, runtime=Runtime(trace=False)
    ).run_sync("1+2")
    assert result.output == 3 and isinstance(result.output, int)


def test_an_answer_that_does_not_fit_the_output_type_ends_as_an_error() -> None:
    agent = Agent(scripted(final("warm, about twelve")), [add], output_type=Weather)
    result = agent.run_sync("weather?", trace=False)
    assert result.halt_reason is HaltReason.ERROR and not result.success
    assert result.output is None and result.answer is None
    assert result.error is not None and result.error.where == "output"
    assert result.error.type == "OutputValidationError" and "Weather" in result.error.message


def test_an_output_type_pydantic_cannot_validate_is_refused_up_front() -> None:
    with pytest.raises(ConfigurationError, match="output_type"):
        Agent(scripted(), [add], output_type=object())  # type: ignore[arg-type]


# --- the option groups ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "field", "value"),
    [
        (lambda: RunLimits(max_steps=0), "max_steps", "0"),
        (lambda: RunLimits(deadline_s=-1.0), "deadline_s", "-1.0"),
        (lambda: RunLimits(tokens=0), "tokens", "0"),
        (lambda: ModelSettings(max_tokens=0), "max_tokens", "0"),
        (lambda: ModelSettings(temperature=3.0), "temperature", "3.0"),
        (lambda: ModelSettings(tool_calling="xml"), "tool_calling", "'xml'"),
        (lambda: ContextSettings(observation_chars=10), "observation_chars", "10"),
        (lambda: ContextSettings(context_observations=-1), "context_observations", "-1"),
        (lambda: PlanExecute(max_plan_steps=0), "max_plan_steps", "0"),
        (lambda: PlanReview(max_sendbacks=-1), "max_sendbacks", "-1"),
        (lambda: Runtime(clock=3), "clock", "3"),
    ],
)
def test_option_groups_name_the_bad_field_and_its_value(build: Any, field: str, value: str) -> None:
    with pytest.raises(ConfigurationError, match=f"{field}={value}"):
        build()


@pytest.mark.parametrize(
    "value",
    [ReAct(), PlanExecute(), PlanReview(), ModelSettings(), RunLimits(), ContextSettings()],
)
def test_option_groups_are_frozen_and_keyword_only(value: Any) -> None:
    fields = dataclasses.fields(value)
    assert all(f.kw_only for f in fields)
    if fields:
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(value, fields[0].name, None)
    with pytest.raises(TypeError):
        type(value)(1)


def test_a_group_in_the_wrong_place_names_the_parameter() -> None:
    with pytest.raises(ConfigurationError, match="limits"):
        Agent(scripted(), [add], limits=ModelSettings())  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="mode"):
        Agent(scripted(), [add], mode="swarm")


def test_mode_names_are_the_modes_with_their_defaults() -> None:
    agent = Agent(scripted(), [add], mode="plan_review")
    assert agent.mode == PlanReview() and agent.settings.max_sendbacks == 2
    planned = Agent(scripted(), [add], mode=PlanExecute(max_replans=5, max_plan_steps=3))
    assert planned.settings.max_replans == 5 and planned.settings.max_plan_steps == 3


async def test_the_default_stop_ends_a_run_without_progress() -> None:
    model = scripted(*(call("add", a=1, b=1) for _ in range(3)), final("2"), cycle=True)
    same_call, _ = make_agent(model, [add])
    result = await same_call.run("1+1")
    assert result.halt_reason is HaltReason.REPEATED_ACTION  # stop_on_repeats(2)
    assert stop_on_no_progress(3) | stop_on_repeats(2) == DEFAULT_STOP
    assert same_call.settings.stop == stop_after_steps(12) | DEFAULT_STOP


async def test_stop_none_leaves_only_the_limits() -> None:
    model = scripted(*(call("add", a=1, b=1) for _ in range(9)))
    agent, _ = make_agent(model, [add], limits=RunLimits(max_steps=5, stop=None))
    result = await agent.run("1+1")
    assert result.halt_reason is HaltReason.STEP_LIMIT and len(result.steps) == 5


async def test_limits_tokens_give_each_run_a_fresh_budget() -> None:
    model = scripted(*(call("add", a=i, b=1) for i in range(40)))
    agent, _ = make_agent(model, [add], limits=RunLimits(tokens=300, stop=None))
    first = await agent.run("count")
    second = await agent.run("count again")
    assert first.halt_reason is HaltReason.BUDGET and second.halt_reason is HaltReason.BUDGET
    assert len(second.steps) >= 1  # the first run's spending did not carry over


# --- every exception inside a run ends it ---------------------------------------------------


def test_a_model_raising_anything_ends_the_run_as_an_error() -> None:
    def reply(messages: tuple[Message, ...], info: CallInfo) -> Any:
        raise RuntimeError("the provider SDK broke")

    result = Agent(FunctionModel(reply), [add], runtime=Runtime(trace=False)).run_sync("1+1")
    assert result.halt_reason is HaltReason.ERROR and not result.success
    assert result.error is not None
    assert (result.error.type, result.error.where) == ("RuntimeError", "model")
    assert result.error.message == "the provider SDK broke" and result.error.tool is None
    assert "RuntimeError: the provider SDK broke" in result.message


def test_a_bug_in_a_plain_tool_names_the_tool() -> None:
    def broken(x: int) -> int:
        """Has a bug."""
        return x.missing  # type: ignore[attr-defined, no-any-return]

    result = Agent(scripted(call("broken", x=1), final("?")), [broken]).run_sync("go", trace=False)
    assert result.halt_reason is HaltReason.ERROR
    assert result.error is not None and result.error.programming_error
    assert (result.error.where, result.error.tool, result.error.type) == (
        "tool",
        "broken",
        "AttributeError",
    )
    assert "tool 'broken' programming error AttributeError" in result.message


def test_a_bug_in_an_atomic_action_names_the_tool() -> None:
    def charge(amount: int) -> int:
        raise NotImplementedError("charging is not written yet")

    action = AtomicAction(name="charge", fn=charge, effect="once")
    agent = Agent(
        scripted(call("charge", amount=3), final("done")), [action], runtime=Runtime(trace=False)
    )
    result = agent.run_sync("pay")
    assert result.error is not None and result.error.tool == "charge"
    assert result.error.type == "NotImplementedError" and result.error.programming_error


def test_a_failing_store_ends_the_run_as_an_error() -> None:
    class FullDisk(MemoryStore):
        async def put(self, *args: Any, **kwargs: Any) -> Any:
            raise StoreUnavailableError("disk full")  # the task is created; its saves fail

        put_with_records = put  # a save that carries the step's records fails the same way

    agent = Agent(
        scripted(call("add", a=1, b=2), final("3")), [add], runtime=Runtime(store=FullDisk())
    )
    result = agent.run_sync("1+2", trace=False)
    assert result.halt_reason is HaltReason.ERROR and result.error is not None
    assert result.error.type == "StoreUnavailableError" and result.error.where == "store"


def test_a_store_failing_before_the_first_step_is_a_recorded_end_too() -> None:
    class Down(MemoryStore):
        async def create(self, *args: Any, **kwargs: Any) -> Any:
            raise StoreUnavailableError("redis://127.0.0.1:6379 is unreachable")

    model = scripted(final("3"))
    result = Agent(model, [add], runtime=Runtime(store=Down(), trace=False)).run_sync("1+2")
    assert result.halt_reason is HaltReason.ERROR and result.steps == []
    assert result.error is not None and result.error.where == "store"
    assert model.calls == []  # nothing ran


def test_iter_sync_returns_the_error_result_instead_of_raising() -> None:
    def reply(messages: tuple[Message, ...], info: CallInfo) -> Any:
        raise KeyError("choices")

    records = Agent(FunctionModel(reply), [add], runtime=Runtime(trace=False)).iter_sync("1+1")
    with pytest.raises(StopIteration) as stopped:
        next(records)
    result = stopped.value.value
    assert result.halt_reason is HaltReason.ERROR and result.error.type == "KeyError"


def test_misuse_before_the_run_still_raises() -> None:
    store = MemoryStore()
    agent = Agent(
        scripted(final("a"), final("b")), [add], runtime=Runtime(store=store, trace=False)
    )
    agent.run_sync("first", session_id="s1")
    with pytest.raises(ConfigurationError, match="session_id"):
        agent.run_sync("second", session_id="s1")

    async def inside() -> None:
        with pytest.raises(ConfigurationError, match="inside a running event loop"):
            agent.run_sync("third")

    asyncio.run(inside())


# --- running: the sync twins and resume --------------------------------------------------------


def test_iter_sync_steps_through_a_run_without_an_event_loop() -> None:
    agent, trace = make_agent(scripted(call("add", a=1, b=2), final("3")), [add])
    records = agent.iter_sync("1+2")
    steps = [r.step_type for r in records]
    assert steps == ["add", "final"]
    assert trace.result is not None and trace.result.success


async def test_iter_gives_the_typed_result_at_the_end() -> None:
    agent = Agent(scripted(final("7")), [add], output_type=int, runtime=Runtime(trace=False))
    run = agent.iter("7")
    async for _ in run:
        pass
    assert isinstance(run.result, AgentResult) and run.result.output == 7


def _handover_setup() -> tuple[MemoryStore, ControlConfig, Any]:
    store = MemoryStore()
    config = ControlConfig(
        eso_min_samples=1, protocol_thresholds=(0.7, 0.8, 0.9), hysteresis=0.0, protocol_dwell=0
    )

    def sensor(n: int) -> Observation:
        """Barely trusted."""
        return Observation.ok({"n": n}, source="sensor", confidence=0.05)

    return store, config, sensor


def test_run_sync_and_resume_sync_are_the_sync_twins() -> None:
    store, config, sensor = _handover_setup()

    def reply(messages: tuple[Message, ...], info: CallInfo) -> dict[str, object]:
        text = messages[-1].content
        return call("sensor", n=1) if "step 1 of" in text else final("n=1")

    agent = Agent(
        FunctionModel(reply), [sensor], control=config, runtime=Runtime(store=store, trace=False)
    )
    frozen = agent.run_sync("read it")
    assert frozen.halt_reason is HaltReason.HANDOVER and frozen.handover_id is not None

    asyncio.run(HandoverQueue(store).decide(frozen.handover_id, "approve"))  # a reviewer's UI
    resumed = agent.resume_sync(frozen.handover_id)
    assert resumed.success and resumed.answer == "n=1" and resumed.output == "n=1"


def test_run_agent_is_agent_run_sync_and_can_resume_by_handover_id() -> None:
    store, config, sensor = _handover_setup()

    def reply(messages: tuple[Message, ...], info: CallInfo) -> dict[str, object]:
        return call("sensor", n=1) if "step 1 of" in messages[-1].content else final("ok")

    options: dict[str, Any] = {
        "model": FunctionModel(reply),
        "tools": [sensor],
        "control": config,
        "runtime": Runtime(store=store, trace=False),
    }
    frozen = run_agent("read it", **options)
    assert frozen.handover_id is not None
    asyncio.run(HandoverQueue(store).decide(frozen.handover_id, "reject", note="wrong sensor"))
    ended = run_agent(resume=frozen.handover_id, **options)
    assert ended.halt_reason is HaltReason.HANDOVER and not ended.success
    assert "wrong sensor" in ended.message


def test_resume_takes_exactly_one_of_a_handover_and_a_task() -> None:
    agent = Agent(scripted(final("4")), [add], runtime=Runtime(trace=False))
    with pytest.raises(ConfigurationError, match="exactly one"):
        agent.resume_sync()
    with pytest.raises(ConfigurationError, match="exactly one"):
        agent.resume_sync("handover-1", task_id="task-1")
    assert not hasattr(agent, "recover") and not hasattr(agent, "recover_sync")
