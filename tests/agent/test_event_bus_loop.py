"""The event bus in the loop: a tool's faults published, the healing actions applied."""

from __future__ import annotations

from typing import Any

import pytest

from closedloop import ConfigurationError
from closedloop.agent import (
    ControlConfig,
    HaltReason,
    HealthSettings,
    RunLimits,
    Runtime,
    StepRecord,
    stop_on_no_progress,
)
from closedloop.agent._event_bus import fault_event
from closedloop.execution import AtomicAction, EffectClass
from closedloop.feedback import (
    EventBus,
    FaultEvent,
    HandoverQueue,
    MemoryStore,
    RateLimited,
    SchemaDrift,
    ServerError,
    TimeoutEvent,
    install_healing,
)
from closedloop.perception import Observation

from .conftest import FakeClock, call, make_agent, scripted
from .test_health import Down


def acted(steps: list[StepRecord]) -> list[str]:
    return [a for s in steps for a in s.actuators.get("acted", ())]


def heard(bus: EventBus) -> list[FaultEvent]:
    """Every fault event published on ``bus``, in order (a handler that answers nothing)."""
    events: list[FaultEvent] = []
    bus.subscribe(FaultEvent, events.append)
    return events


class Answers:
    """A read that answers ``answer()`` every time, and counts its calls."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.calls = 0

    async def lookup(self, city: str) -> Observation:
        """Look a city up."""
        self.calls += 1
        answer: Observation = self.answer()
        return answer


async def bus_run(
    clock: FakeClock,
    tool: Any,
    bus: EventBus | None,
    *,
    model: Any = None,
    health: HealthSettings | None = None,
    max_steps: int = 8,
) -> Any:
    agent, _ = make_agent(
        model or scripted(call("lookup", city="Paris"), cycle=True),
        [tool],
        control=ControlConfig(health=health),
        limits=RunLimits(max_steps=max_steps, stop=stop_on_no_progress(20)),
        runtime=Runtime(clock=clock, wall_clock=clock, sleep=clock.sleep, events=bus),
    )
    return agent, await agent.run("weather in Paris")


async def test_5xx_events_open_the_tools_breaker(clock: FakeClock) -> None:
    bus = EventBus()
    events = heard(bus)
    strategies = install_healing(bus, MemoryStore(), circuit_clock=clock, clock=clock)
    world = Down()
    # The loop's own count would open the breaker only after 50 calls: the bus opens it.
    agent, result = await bus_run(
        clock,
        world.lookup,
        bus,
        model=scripted(*(call("lookup", city=f"city {i}") for i in range(8))),
        health=HealthSettings(failure_threshold=50, recovery_s=60.0),
    )
    assert events and all(isinstance(e, ServerError) for e in events)
    assert {(e.source, e.status_code, e.session_id) for e in events} == {  # type: ignore[attr-defined]
        ("lookup", 503, result.task_id)  # the session: the task id unless one is given
    }
    opened = [a for a in acted(result.steps) if a.startswith("event bus: open_circuit on lookup")]
    assert opened and "ignored" not in opened[0]
    # The bus's breaker opened at its threshold, and so the loop's: no call after that.
    assert len(events) == strategies.circuit.breaker("lookup").failure_threshold
    assert world.calls == len(events)
    assert agent._health.snapshot()["lookup"]["breaker"] == "open"
    refused = [s for s in result.steps if "taken as down" in str(s.observation)]
    assert refused and "the event bus opened its breaker" in str(refused[0].observation)


async def test_an_open_circuit_without_tool_health_is_recorded_and_ignored(
    clock: FakeClock,
) -> None:
    bus = EventBus()
    install_healing(bus, MemoryStore(), circuit_clock=clock, clock=clock)
    world = Down()
    _, result = await bus_run(clock, world.lookup, bus, max_steps=10)
    opened = [a for a in acted(result.steps) if "open_circuit" in a]
    assert opened and all("ignored: the agent keeps no tool health" in a for a in opened)
    assert not any("taken as down" in str(s.observation) for s in result.steps)


async def test_a_timeout_widens_the_tools_next_timeout() -> None:
    def timeouts(healing: bool) -> Any:
        async def run() -> tuple[list[float], list[str]]:
            bus = EventBus()
            events = heard(bus)
            if healing:
                install_healing(bus, MemoryStore(), circuit_clock=clock, clock=clock)
            world = Answers(lambda: Observation.timeout(source="lookup", timeout_s=1.0))
            _, result = await bus_run(clock, world.lookup, bus, max_steps=4)
            seen = [e.timeout_s for e in events if isinstance(e, TimeoutEvent)]
            assert len(seen) == len(events) == world.calls
            return [t for t in seen if t is not None], acted(result.steps)

        clock = FakeClock()
        return run()

    scheduled, plain = await timeouts(healing=False)
    widened, healed = await timeouts(healing=True)
    assert len(scheduled) == len(widened) >= 3
    assert not any(a.startswith("event bus") for a in plain)
    widen = [a for a in healed if a.startswith("event bus: widen_timeout on lookup")]
    assert len(widen) == len(widened) and "ignored" not in widen[0]
    # Each attempt ran under the larger of its scheduled timeout and the one the last
    # timeout widened to (WidenTimeout: 1.5 times, at most 30 s).
    assert widened[0] == scheduled[0]
    expected = [max(s, min(30.0, w * 1.5)) for s, w in zip(scheduled[1:], widened, strict=False)]
    assert widened[1:] == pytest.approx(expected)
    assert widened != scheduled
    assert f"widen the timeout to {min(30.0, widened[0] * 1.5):g}s" in widen[0]


async def test_repeated_drift_escalates_to_a_handover(clock: FakeClock) -> None:
    bus = EventBus()
    events = heard(bus)
    healing_store = MemoryStore()
    install_healing(bus, healing_store, clock=clock, drift_escalation_after=2)
    world = Answers(lambda: Observation.partial({"city": "?"}, source="lookup", missing=("t",)))
    model = scripted(
        call("lookup", city="Paris"), call("lookup", city="Lyon"), call("lookup", city="Nice")
    )
    agent, result = await bus_run(clock, world.lookup, bus, model=model)
    assert result.halt_reason is HaltReason.HANDOVER
    assert [type(e) for e in events] == [SchemaDrift, SchemaDrift]
    last = result.steps[-1]
    assert len(result.steps) == 2 and world.calls == 2
    assert any(a.startswith("event bus: escalate on lookup") for a in last.actuators["acted"])
    assert any(
        "the event bus escalated: SchemaDrift from lookup (2 times)" in n for n in last.notes
    )
    assert last.observation is not None  # the answer that escalated is in the record
    # The loop's own handover path queued the task, the strategy its escalation entry.
    pending = await HandoverQueue(agent.store).list("pending")
    assert [item.task_id for item in pending] == [result.task_id]
    assert await healing_store.record_list("handover")


async def test_a_429_publishes_its_retry_after_and_the_cache_action_is_ignored(
    clock: FakeClock,
) -> None:
    bus = EventBus()
    events = heard(bus)
    install_healing(bus, MemoryStore(), circuit_clock=clock, clock=clock)
    world = Answers(lambda: Observation.rate_limited(source="lookup", retry_after_s=2.0))
    _, result = await bus_run(clock, world.lookup, bus, max_steps=2)
    assert events and isinstance(events[0], RateLimited)
    assert events[0].retry_after_s == 2.0
    cached = [a for a in acted(result.steps) if a.startswith("event bus: use_cache")]
    assert cached and all("ignored: the loop keeps no cache" in a for a in cached)


async def test_a_run_without_a_bus_records_no_bus_actions(clock: FakeClock) -> None:
    world = Down()
    _, result = await bus_run(
        clock, world.lookup, None, health=HealthSettings(failure_threshold=2, recovery_s=60.0)
    )
    assert world.calls > 0
    assert acted(result.steps)  # the loop's own breaker still acts
    assert not any(a.startswith("event bus") for a in acted(result.steps))


async def test_a_bus_without_healing_changes_nothing() -> None:
    quiet, loud = Down(), Down()
    bus = EventBus()
    events = heard(bus)
    _, with_bus = await bus_run(FakeClock(), quiet.lookup, bus, max_steps=4)
    _, without = await bus_run(FakeClock(), loud.lookup, None, max_steps=4)
    assert len(events) == quiet.calls == loud.calls > 0

    def seen(steps: list[StepRecord]) -> list[Any]:
        return [(s.step_type, s.action, s.retries, s.actuators) for s in steps]

    assert seen(with_bus.steps) == seen(without.steps)
    assert not any(a.startswith("event bus") for a in acted(with_bus.steps))


def test_events_must_be_an_event_bus() -> None:
    with pytest.raises(ConfigurationError, match="events") as raised:
        Runtime(events="bus")  # type: ignore[arg-type]
    assert "'bus'" in str(raised.value)


@pytest.mark.parametrize(
    ("answer", "kind"),
    [
        (Observation.failed("HTTP 502", source="lookup"), ServerError),
        (Observation.timeout(source="lookup", timeout_s=1.0), TimeoutEvent),
        (Observation.rate_limited(source="lookup", retry_after_s=1.0), RateLimited),
        (Observation.partial({}, source="lookup", missing=("t",)), SchemaDrift),
        (Observation.failed("HTTP 404", source="lookup"), None),  # a definite answer
        (Observation.ok({"t": 1}, source="lookup"), None),
        (Observation.empty(source="lookup"), None),
    ],
)
def test_only_the_faults_the_loop_classifies_are_published(
    answer: Observation, kind: type[FaultEvent] | None
) -> None:
    event = fault_event(answer, source="lookup", session_id="s1", timeout_s=2.0, latency_s=0.1)
    assert (None if event is None else type(event)) is kind
    if event is not None:
        assert (event.source, event.session_id) == ("lookup", "s1")
        assert event.detail  # the answer's error or meaning goes with it


async def test_a_tool_with_its_own_timeout_keeps_it(clock: FakeClock) -> None:
    bus = EventBus()
    events = heard(bus)
    install_healing(bus, MemoryStore(), circuit_clock=clock, clock=clock)
    world = Answers(lambda: Observation.timeout(source="lookup", timeout_s=3.0))
    fixed = AtomicAction(
        name="lookup", fn=world.lookup, effect=EffectClass.RECOMPUTABLE, timeout_s=3.0
    )
    model = scripted(*(call("lookup", city=f"city {i}") for i in range(3)))
    _, result = await bus_run(clock, fixed, bus, model=model, max_steps=3)
    timeouts = [e.timeout_s for e in events if isinstance(e, TimeoutEvent)]
    assert len(timeouts) == world.calls >= 2 and set(timeouts) == {3.0}
    widen = [a for a in acted(result.steps) if a.startswith("event bus: widen_timeout")]
    assert widen and all("ignored: the tool's own action fixes its timeout" in a for a in widen)
