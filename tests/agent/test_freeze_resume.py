"""MANUAL_HANDOVER: the task freezes with its pending action; a human decision resumes or ends it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from closedloop import ConfigurationError
from closedloop.agent import Agent, ControlConfig, HaltReason, Runtime, Task, TaskState
from closedloop.execution import AtomicAction, EffectClass
from closedloop.feedback import HandoverQueue, HandoverStatus, MemoryStore, SQLiteStore, StateStore
from closedloop.models import CallInfo, FunctionModel, Message
from closedloop.perception import Observation

from .conftest import call, final, make_agent

HANDOVER = ControlConfig(
    eso_min_samples=1, protocol_thresholds=(0.7, 0.8, 0.9), hysteresis=0.0, protocol_dwell=0
)
HANDOVER_SOON = ControlConfig(
    eso_min_samples=1, protocol_thresholds=(0.2, 0.3, 0.4), hysteresis=0.0, protocol_dwell=0
)


def _step(messages: tuple[Message, ...]) -> int:
    match = re.search(r"step (\d+) of", messages[-1].content)
    assert match is not None
    return int(match.group(1))


class Desk:
    """A booking desk whose sensor first answers with almost no confidence."""

    def __init__(self, confidence: float = 0.05) -> None:
        self.confidence = confidence
        self.booked: list[str] = []

    def tools(self) -> list[Any]:
        def availability(day: str) -> Observation:
            """Rooms free on a day."""
            return Observation.ok(
                {"rooms": ["A", "B"]}, source="availability", confidence=self.confidence
            )

        def book(room: str, day: str) -> dict[str, str]:
            """Book a room."""
            self.booked.append(room)
            return {"booking_id": f"BK-{room}", "room": room}

        return [availability, book]


def _model() -> FunctionModel:
    def reply(messages: tuple[Message, ...], info: CallInfo) -> dict[str, Any]:
        step = _step(messages)
        if step == 1:
            return call("availability", day="Fri")
        if step == 2:
            return call("book", room="A", day="Fri")
        return final("booked")

    return FunctionModel(reply)


async def _frozen(store: StateStore, desk: Desk) -> tuple[Agent, str, Any]:
    agent, _ = make_agent(_model(), desk.tools(), control=HANDOVER, runtime=Runtime(store=store))
    result = await agent.run(Task(prompt="Book a room on Friday.", task_id="t_desk"))
    assert result.halt_reason is HaltReason.HANDOVER and not result.success
    assert result.handover_id is not None and desk.booked == []
    return agent, result.handover_id, result


async def test_handover_freezes_the_task_and_queues_an_audit() -> None:
    store = MemoryStore()
    await store.record_put(
        "successes",
        "book/abc",
        {
            "step_type": "book",
            "run_id": "r0",
            "task": "earlier",
            "arguments": {"room": "C", "day": "Mon"},
            "observed": "book: ok",
        },
    )
    desk = Desk()
    _, handover_id, result = await _frozen(store, desk)
    frozen = result.steps[-1]
    assert frozen.protocol == "manual_handover" and frozen.halt is HaltReason.HANDOVER
    assert frozen.action is not None and frozen.action.tool == "book"
    item = await HandoverQueue(store).get(handover_id)
    assert item.status is HandoverStatus.PENDING and item.task_id == "t_desk"
    audit = item.audit
    assert audit["pending_action"]["tool"] == "book"
    assert audit["pending_action"]["arguments"] == {"room": "A", "day": "Fri"}
    assert audit["observed"][0]["observation"]["status"] == "ok"
    assert audit["control"]["f_est"] >= 0.9
    assert "BK" not in str(audit) and "room" in str(audit["suggested_fix"])
    assert "reached the manual-handover level" in audit["reason"]
    state = TaskState.model_validate((await store.get("t_desk")).to_dict())
    assert state.status == "frozen" and state.handover_id == handover_id
    assert state.pending is not None and state.pending.tool == "book"


async def test_approve_runs_the_frozen_action_and_continues() -> None:
    store = MemoryStore()
    desk = Desk()
    agent, handover_id, frozen = await _frozen(store, desk)
    await HandoverQueue(store).decide(handover_id, "approve", decided_by="ops")
    result = await agent.resume(handover_id)
    assert desk.booked == ["A"]
    assert result.halt_reason is HaltReason.FINAL and result.success
    assert result.run_id == frozen.run_id
    assert [r.step for r in result.steps] == [2, 3]  # numbering continues after the freeze
    assert result.steps[0].protocol == "normal"
    with pytest.raises(ConfigurationError, match="already resumed"):
        await agent.resume(handover_id)


async def test_edit_changes_the_frozen_arguments_before_they_run() -> None:
    store = MemoryStore()
    desk = Desk()
    agent, handover_id, _ = await _frozen(store, desk)
    await HandoverQueue(store).decide(
        handover_id, "edit", edits={"arguments": {"room": "B"}, "note": "A is being cleaned"}
    )
    result = await agent.resume(handover_id)
    assert desk.booked == ["B"]
    assert result.success
    assert result.steps[0].action is not None and result.steps[0].action.arguments["room"] == "B"


async def test_reject_ends_the_task_without_success() -> None:
    store = MemoryStore()
    desk = Desk()
    agent, handover_id, _ = await _frozen(store, desk)
    await HandoverQueue(store).decide(handover_id, "reject", note="no bookings on Fridays")
    result = await agent.resume(handover_id)
    assert desk.booked == []
    assert result.halt_reason is HaltReason.HANDOVER and not result.success
    assert "no bookings on Fridays" in result.message and result.handover_id == handover_id
    state = TaskState.model_validate((await store.get("t_desk")).to_dict())
    assert state.status == "done"


async def test_a_pending_handover_cannot_be_resumed() -> None:
    store = MemoryStore()
    agent, handover_id, _ = await _frozen(store, Desk())
    with pytest.raises(ConfigurationError, match="still pending"):
        await agent.resume(handover_id)


async def test_the_queue_and_the_frozen_state_survive_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    first = SQLiteStore(path)
    desk = Desk()
    _, handover_id, _ = await _frozen(first, desk)
    await first.close()

    reopened = SQLiteStore(path)
    try:
        await HandoverQueue(reopened).decide(handover_id, "approve")
        fresh, _ = make_agent(
            _model(), desk.tools(), control=HANDOVER, runtime=Runtime(store=reopened)
        )
        result = await fresh.resume(handover_id)
    finally:
        await reopened.close()
    assert desk.booked == ["A"] and result.success


async def test_an_action_that_needs_confirmation_is_handed_over_then_confirmed() -> None:
    paid: list[float] = []

    async def pay(amount: float) -> str:
        paid.append(amount)
        return "paid"

    action = AtomicAction(
        name="pay", fn=pay, effect=EffectClass.IRREVERSIBLE, requires_confirmation=True
    )

    def reply(messages: tuple[Message, ...], info: CallInfo) -> dict[str, Any]:
        return call("pay", amount=12.5) if _step(messages) == 1 else final("paid")

    store = MemoryStore()
    agent, _ = make_agent(FunctionModel(reply), [action], runtime=Runtime(store=store))
    frozen = await agent.run("Pay the invoice.")
    assert frozen.halt_reason is HaltReason.HANDOVER and paid == []
    assert frozen.handover_id is not None
    item = await HandoverQueue(store).get(frozen.handover_id)
    assert "needs a human confirmation" in item.audit["reason"]
    await HandoverQueue(store).decide(frozen.handover_id, "approve", decided_by="cfo")
    result = await agent.resume(frozen.handover_id)
    assert paid == [12.5] and result.success
    state = TaskState.model_validate((await store.get(result.task_id)).to_dict())
    (key,) = state.effect_keys  # the idempotency key the payment ran under
    assert key.startswith(f"{result.task_id}/1/pay/")
    ledger = await store.record_get("ledger", key)
    assert ledger is not None and ledger.value["status"] == "committed"


async def test_a_plan_step_frozen_for_handover_resumes_in_place() -> None:
    desk = Desk()

    def reply(messages: tuple[Message, ...], info: CallInfo) -> dict[str, Any]:
        if "phase: planning" in messages[-1].content:
            return {
                "plan": [
                    {"tool": "availability", "arguments": {"day": "Fri"}, "goal": "see rooms"},
                    {"tool": "book", "arguments": {"room": "A", "day": "Fri"}, "goal": "book"},
                ]
            }
        return final("booked")

    store = MemoryStore()
    agent, _ = make_agent(
        FunctionModel(reply),
        desk.tools(),
        control=HANDOVER_SOON,
        mode="plan_execute",
        runtime=Runtime(store=store),
    )
    frozen = await agent.run("Book a room on Friday.")
    assert frozen.halt_reason is HaltReason.HANDOVER and desk.booked == []
    assert frozen.handover_id is not None
    await HandoverQueue(store).decide(
        frozen.handover_id, "edit", edits={"arguments": {"room": "B"}}
    )
    result = await agent.resume(frozen.handover_id)
    assert desk.booked == ["B"] and result.success
    assert [r.phase for r in result.steps] == ["executing", "finishing"]
