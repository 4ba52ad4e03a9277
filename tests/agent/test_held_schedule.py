"""A held (frozen) schedule tells every reader of the control signal the held u."""

from __future__ import annotations

from typing import Any

import pytest

from closedloop.agent import ControlConfig, Runtime, default_schedule
from closedloop.agent._control import ControlReading, TaskControl
from closedloop.control import ActuatorSchedule
from closedloop.feedback import MemoryStore
from closedloop.integrations import ControlLoop
from closedloop.perception import Observation

from .conftest import FakeClock, call, final, make_agent, scripted, system_of

HELD = 0.5


class Reads:
    """A read whose answers are scripted: each call takes the next one."""

    def __init__(self, *answers: Observation) -> None:
        self.answers = list(answers)
        self.calls = 0

    async def lookup(self, city: str) -> Observation:
        """Look a city up."""
        answer = self.answers[min(self.calls, len(self.answers) - 1)]
        self.calls += 1
        return answer


def ok() -> Observation:
    return Observation.ok({"city": "Paris", "temp_c": 21}, source="lookup")


async def hot_store() -> MemoryStore:
    """Every key's PID history all errors: the live controller's output is high."""
    store = MemoryStore()
    for key in ("lookup", "final", "invalid"):
        await store.record_put("control", key, {"errors": [1.0] * 6})
    return store


def held() -> ControlConfig:
    return ControlConfig(protocols=False, schedule=default_schedule().held(HELD))


def test_held_settings_report_the_held_u_at_every_input() -> None:
    schedule = default_schedule().held(HELD)
    live = default_schedule()(HELD)
    for u in (0.0, 0.3, 0.99, 1.0, 7.0):
        assert schedule(u) == live
        assert schedule.reported(u) == HELD
    assert schedule.max_retries(1.0) == live.max_retries  # a direct call is held too
    assert ActuatorSchedule().reported(0.8) == 0.8


async def test_every_reader_sees_the_held_u_while_errors_drive_the_pid(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    observed: list[float] = []
    original = TaskControl.observe

    def spy(self: TaskControl, control: float, *args: Any) -> ControlReading:
        observed.append(control)
        return original(self, control, *args)

    monkeypatch.setattr(TaskControl, "observe", spy)
    world = Reads(
        Observation.failed("HTTP 500", source="lookup"), Observation.empty(source="lookup"), ok()
    )
    model = scripted(
        call("no_such_tool"),  # refused: error 1 for the PID
        call("lookup", city="Paris"),
        call("lookup", city="Paris"),
        final("21"),
    )
    agent, _ = make_agent(
        model,
        [world.lookup],
        control=held(),
        runtime=Runtime(clock=clock, sleep=clock.sleep, store=await hot_store()),
    )
    result = await agent.run("weather in Paris")
    assert len(result.steps) >= 3
    assert any(step.error > 0.5 for step in result.steps)  # errors that would move the PID
    for step in result.steps:
        assert step.control == HELD, step
        assert step.actuators["u"] == HELD and step.actuators["model_u"] == HELD
    assert observed and set(observed) == {HELD}  # the observer's input
    for index in range(len(model.calls)):
        assert f"Current rigour: {HELD:.2f}" in system_of(model, index)


async def test_the_empty_answer_recheck_reads_the_held_u(clock: FakeClock) -> None:
    # A cold controller (live u = 0) would accept the empty answer; held at 0.5 the
    # re-check reads 0.5, at the ReadRetry's empty_error, and asks again.
    world = Reads(Observation.empty(source="lookup"), ok())
    model = scripted(call("lookup", city="Paris"), final("21"))
    agent, _ = make_agent(
        model, [world.lookup], control=held(), runtime=Runtime(clock=clock, sleep=clock.sleep)
    )
    result = await agent.run("weather in Paris")
    assert world.calls == 2 and "empty" in result.steps[0].retries[0]["reason"]


def test_the_integrations_loop_records_the_held_u() -> None:
    loop = ControlLoop(schedule=default_schedule().held(HELD))
    for _ in range(5):
        record = loop.update("llm", 1.0)
        assert record.u == HELD and record.settings.u == HELD and record.applied.u == HELD
    assert loop.context("llm").rigour == HELD
