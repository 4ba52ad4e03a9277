"""The public surface: what closedloop and closedloop.agent export, sync twins, resume by id."""

from __future__ import annotations

import asyncio
import inspect

import closedloop
import closedloop.agent as agent_pkg
from closedloop.agent import Agent, ControlConfig, HaltReason, run_agent_async
from closedloop.feedback import HandoverQueue, MemoryStore
from closedloop.models import CallInfo, FunctionModel, Message
from closedloop.perception import Observation

from .conftest import add, call, final, make_agent, scripted

TOP_LEVEL_LOOP_NAMES = {
    "Agent",
    "HaltReason",
    "RunResult",
    "run_agent",
    "run_agent_async",
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


def test_the_agent_package_exports_a_sorted_documented_surface() -> None:
    names = agent_pkg.__all__
    assert len(names) == len(set(names))
    assert sorted(names, key=lambda n: (not n.isupper(), not n[:1].isupper(), n)) == names
    for name in names:
        obj = getattr(agent_pkg, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            assert inspect.getdoc(obj), f"{name} has no docstring"
            assert obj.__module__ in ("closedloop.agent", "closedloop.policy"), name


def test_iter_sync_steps_through_a_run_without_an_event_loop() -> None:
    agent, trace = make_agent(scripted(call("add", a=1, b=2), final("3")), [add])
    records = agent.iter_sync("1+2")
    steps = [r.step_type for r in records]
    assert steps == ["add", "final"]
    assert trace.result is not None and trace.result.success


def test_run_sync_and_resume_sync_are_the_sync_twins() -> None:
    store = MemoryStore()
    config = ControlConfig(eso_min_samples=1, protocol_thresholds=(0.7, 0.8, 0.9), hysteresis=0.0)

    def sensor(n: int) -> Observation:
        """Barely trusted."""
        return Observation.ok({"n": n}, source="sensor", confidence=0.05)

    def reply(messages: tuple[Message, ...], info: CallInfo) -> dict[str, object]:
        text = messages[-1].content
        return call("sensor", n=1) if "step 1 of" in text else final("n=1")

    agent = Agent(FunctionModel(reply), [sensor], store=store, control=config, trace=False)
    frozen = agent.run_sync("read it")
    assert frozen.halt_reason is HaltReason.HANDOVER and frozen.handover_id is not None

    asyncio.run(HandoverQueue(store).decide(frozen.handover_id, "approve"))  # a reviewer's UI
    resumed = agent.resume_sync(frozen.handover_id)
    assert resumed.success and resumed.answer == "n=1"


async def test_run_agent_async_can_resume_by_handover_id() -> None:
    store = MemoryStore()
    config = ControlConfig(eso_min_samples=1, protocol_thresholds=(0.7, 0.8, 0.9), hysteresis=0.0)

    def sensor(n: int) -> Observation:
        """Barely trusted."""
        return Observation.ok({"n": n}, source="sensor", confidence=0.05)

    def reply(messages: tuple[Message, ...], info: CallInfo) -> dict[str, object]:
        return call("sensor", n=1) if "step 1 of" in messages[-1].content else final("ok")

    options = {"model": FunctionModel(reply), "tools": [sensor], "store": store, "control": config}
    frozen = await run_agent_async("read it", trace=False, **options)  # type: ignore[arg-type]
    assert frozen.handover_id is not None
    await HandoverQueue(store).decide(frozen.handover_id, "reject", note="wrong sensor")
    ended = await run_agent_async(resume=frozen.handover_id, trace=False, **options)  # type: ignore[arg-type]
    assert ended.halt_reason is HaltReason.HANDOVER and not ended.success
    assert "wrong sensor" in ended.message
