"""Task-level control state follows the task into another process (here: another Agent on
another store object over the same SQLite file), so a recovered task continues with the
same f_est, protocol and PID outputs as a run that was never interrupted."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from closedloop import Runtime
from closedloop.agent import (
    Agent,
    ControlConfig,
    RunLimits,
    RunResult,
    StepRecord,
    stop_on_no_progress,
    stop_on_repeats,
)
from closedloop.agent._control import TaskControl
from closedloop.control import LatencyTracker, Protocol, ProtocolSelector
from closedloop.feedback import SQLiteStore
from closedloop.models import CallInfo, FunctionModel, Message
from closedloop.perception import Observation

# Readings lose confidence step by step: the ESO's f_est climbs through every protocol.
CONFIDENCE = (0.95, 0.9, 0.8, 0.6, 0.4, 0.2, 0.1, 0.05)
CONTROL = ControlConfig(
    eso_min_samples=3, protocol_thresholds=(0.3, 0.5, 0.7), hysteresis=0.05, protocol_dwell=1
)


def probe(sample: int) -> Observation:
    """Read one sample of the sensor."""
    confidence = CONFIDENCE[min(max(sample, 0), len(CONFIDENCE) - 1)]
    return Observation.ok(
        {"sample": sample, "reading": 10 + sample}, source="probe", confidence=confidence
    )


def reply(messages: tuple[Message, ...], info: CallInfo) -> dict[str, Any]:
    step = int(re.findall(r"step (\d+) of", messages[-1].content)[0])
    if step <= 8:
        return {"tool": "probe", "arguments": {"sample": step - 1}}
    return {"final": "eight samples read"}


def agent(store: SQLiteStore) -> Agent:
    return Agent(
        FunctionModel(reply, name="sensor"),
        [probe],
        control=CONTROL,
        limits=RunLimits(max_steps=12, stop=stop_on_no_progress(20) | stop_on_repeats(2)),
        runtime=Runtime(store=store, trace=False),
    )


class Crash(BaseException):
    """The process 'dies': nothing after it reaches the store."""


class CrashAfterPuts:
    """A store that stops accepting writes after ``puts`` task-state saves (a dead process)."""

    def __init__(self, inner: SQLiteStore, puts: int) -> None:
        self.inner = inner
        self.left = puts

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _alive(self) -> None:
        if self.left <= 0:
            raise Crash

    async def put(self, *args: Any, **kwargs: Any) -> Any:
        self._alive()
        snapshot = await self.inner.put(*args, **kwargs)
        self.left -= 1
        return snapshot

    async def record_put(self, *args: Any, **kwargs: Any) -> Any:
        self._alive()
        return await self.inner.record_put(*args, **kwargs)

    async def record_delete(self, *args: Any, **kwargs: Any) -> Any:
        self._alive()
        return await self.inner.record_delete(*args, **kwargs)


def signals(record: StepRecord) -> tuple[Any, ...]:
    return (
        record.step,
        record.step_type,
        record.error,
        record.control,
        record.pid_components,
        record.quality,
        record.f_est,
        record.protocol,
        record.lyapunov_v,
        record.halt,
    )


async def uninterrupted(path: Path) -> RunResult:
    store = SQLiteStore(path)
    try:
        return await agent(store).run("read the sensor", session_id="sensor-task")
    finally:
        await store.close()


@pytest.mark.parametrize("saved_steps", [1, 3, 5])
async def test_a_task_continues_in_another_agent_with_the_same_control(
    tmp_path: Path, saved_steps: int
) -> None:
    reference = await uninterrupted(tmp_path / "reference.db")
    protocols = {r.protocol for r in reference.steps}
    assert {Protocol.NORMAL.value, Protocol.DUAL_VERIFICATION.value} <= protocols  # it climbs

    path = tmp_path / "shared.db"
    first_store = SQLiteStore(path)
    first: list[StepRecord] = []
    with pytest.raises(Crash):
        crashing = CrashAfterPuts(first_store, saved_steps)
        async for record in agent(crashing).iter(  # type: ignore[arg-type]
            "read the sensor", session_id="sensor-task"
        ):
            first.append(record)
    await first_store.close()
    assert len(first) == saved_steps
    saved = json.loads(json.dumps((await SQLiteStore(path).get("sensor-task")).to_dict()))
    assert saved["status"] == "running" and saved["step"] == saved_steps
    assert saved["control"]["selector"]["level"] == Protocol(first[-1].protocol).level

    second_store = SQLiteStore(path)  # another store object on the same file
    try:
        rest = await agent(second_store).resume(task_id="sensor-task")
    finally:
        await second_store.close()
    combined = [*first, *rest.steps]
    assert [signals(r) for r in combined] == [signals(r) for r in reference.steps]
    assert rest.halt_reason is reference.halt_reason
    assert "resumed after an interruption" in rest.steps[0].notes[0]
    assert not any("resumed" in n for r in reference.steps for n in r.notes)


async def test_recover_sends_a_frozen_task_to_its_handover(tmp_path: Path) -> None:
    result = await uninterrupted(tmp_path / "done.db")
    assert result.handover_id is not None  # the sensor task ends frozen for a human
    store = SQLiteStore(tmp_path / "done.db")
    try:
        with pytest.raises(ValueError, match=f"frozen for a human.*{result.handover_id}"):
            await agent(store).resume(task_id="sensor-task")
    finally:
        await store.close()


unit = st.floats(0.0, 1.0, allow_nan=False)


@settings(max_examples=40, deadline=None)
@given(
    head=st.lists(st.tuples(unit, unit, unit), max_size=30),
    tail=st.lists(st.tuples(unit, unit, unit), min_size=1, max_size=10),
)
def test_task_control_snapshot_round_trips_through_json(
    head: list[tuple[float, float, float]], tail: list[tuple[float, float, float]]
) -> None:
    config = ControlConfig(eso_min_samples=3, hysteresis=0.1)
    original = TaskControl(config, 0.9)
    for u, q, c in head:
        original.observe(u, q, c)
    copy = TaskControl(config, 0.9)
    copy.restore(json.loads(json.dumps(original.snapshot())))
    assert copy.protocol is original.protocol and copy.f_est == original.f_est
    for u, q, c in tail:
        assert copy.observe(u, q, c) == original.observe(u, q, c)


@given(st.lists(st.floats(-1.0, 2.0, allow_nan=False), max_size=40))
def test_protocol_selector_state_keeps_the_level(estimates: list[float]) -> None:
    selector = ProtocolSelector((0.4, 0.6, 0.8), 0.1)
    for f in estimates:
        selector.select(f)
    copy = ProtocolSelector.from_state(json.loads(json.dumps(selector.state())))
    assert copy.protocol is selector.protocol
    assert copy.select(0.55) is selector.select(0.55)


@given(st.lists(st.floats(0.0, 100.0, allow_nan=False), max_size=30))
def test_latency_tracker_state_round_trips(latencies: list[float]) -> None:
    tracker = LatencyTracker(window=10, min_samples=3)
    for latency in latencies:
        tracker.record(latency)
    copy = LatencyTracker.from_state(json.loads(json.dumps(tracker.state())))
    assert copy.samples == tracker.samples
    assert copy.p95() == tracker.p95()
    assert copy.dynamic_timeout() == tracker.dynamic_timeout()


def test_state_loaders_name_what_is_wrong() -> None:
    with pytest.raises(ValueError, match="level"):
        ProtocolSelector.from_state({"thresholds": [0.4, 0.6, 0.8], "hysteresis": 0, "level": 9})
    with pytest.raises(ValueError, match="samples"):
        LatencyTracker().load([1.0, -2.0])
