"""Healing strategies: typed decisions, shared breakers, and the human handover queue."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import pytest
from pydantic import BaseModel

from closedloop import (
    CircuitOpenError,
    ConfigurationError,
    StaleStateError,
    StateSerializationError,
)
from closedloop.feedback import (
    HANDOVER_NAMESPACE,
    CircuitState,
    EmptyResult,
    EscalateToHuman,
    EventBus,
    HandoverRequested,
    HealingAction,
    HealingKind,
    MemoryStore,
    OpenCircuit,
    RateLimited,
    SchemaDrift,
    ServerError,
    SwitchToCache,
    TimeoutEvent,
    WidenTimeout,
    event_payload,
    install_healing,
)

from .conftest import FakeClock


def test_switch_to_cache_passes_retry_after_on() -> None:
    action = SwitchToCache(max_age_s=300)(RateLimited(source="flights", retry_after_s=12))
    assert action.kind is HealingKind.USE_CACHE
    assert dict(action.params) == {"source": "flights", "max_age_s": 300, "retry_after_s": 12.0}
    assert "RateLimited from flights" in action.reason and "12s" in action.reason
    plain = SwitchToCache()(ServerError(source="flights", status_code=503))
    assert dict(plain.params) == {"source": "flights", "max_age_s": None}


def test_widen_timeout_multiplies_and_caps() -> None:
    widen = WidenTimeout(factor=2.0, cap_s=5.0, default_s=1.0)
    first = widen(TimeoutEvent(source="api", timeout_s=2.0))
    assert first.kind is HealingKind.WIDEN_TIMEOUT
    assert (first.params["timeout_s"], first.params["previous_timeout_s"]) == (4.0, 2.0)
    assert widen(TimeoutEvent(source="api", timeout_s=4.0)).params["timeout_s"] == 5.0
    assert widen(TimeoutEvent(source="api")).params["timeout_s"] == 2.0
    with pytest.raises(ConfigurationError, match="factor"):
        WidenTimeout(factor=1.0)
    with pytest.raises(ConfigurationError, match="cap_s"):
        WidenTimeout(cap_s=-1)


async def test_open_circuit_counts_events_and_shares_its_breaker(clock: FakeClock) -> None:
    circuit = OpenCircuit(failure_threshold=3, recovery_timeout_s=30, clock=clock)
    assert circuit(ServerError(source="a")) is None
    assert circuit(ServerError(source="b")) is None  # another source, another breaker
    assert circuit(ServerError(source="a")) is None
    action = circuit(TimeoutEvent(source="a"))
    assert action is not None and action.kind is HealingKind.OPEN_CIRCUIT
    assert dict(action.params) == {
        "source": "a",
        "retry_at": clock.now + 30,
        "recovery_timeout_s": 30.0,
    }
    breaker = circuit.breaker("a")
    assert breaker is circuit.breaker("a") and breaker.state is CircuitState.OPEN
    assert circuit.breaker("b").state is CircuitState.CLOSED

    async def call_source() -> str:
        return "fresh"

    # A tool calling through the shared breaker is refused, then probes and closes it.
    with pytest.raises(CircuitOpenError):
        await breaker.call(call_source)
    clock.advance(30)
    assert await breaker.call(call_source) == "fresh"
    assert breaker.state is CircuitState.CLOSED


async def test_escalation_writes_an_audit_record_to_the_handover_queue(clock: FakeClock) -> None:
    store = MemoryStore(clock=clock)
    ids = itertools.count(1)
    escalate = EscalateToHuman(store, after=2, clock=clock, new_id=lambda: f"h{next(ids)}")

    drift = SchemaDrift(source="flights", session_id="sess-1", missing_fields=("price",))
    assert await escalate(drift) is None  # first drift: counted, not escalated
    assert await store.record_list(HANDOVER_NAMESPACE) == []
    # Counts are per (session, source).
    assert await escalate(SchemaDrift(source="hotels", session_id="sess-1")) is None

    action = await escalate(drift)
    assert action is not None and action.kind is HealingKind.ESCALATE
    assert dict(action.params) == {
        "namespace": "handover",
        "key": "sess-1/h1",
        "session_id": "sess-1",
    }
    assert "SchemaDrift from flights (2 times)" in action.reason

    (record,) = await store.record_list(HANDOVER_NAMESPACE, prefix="sess-1/")
    assert record.version == 1
    assert record.to_dict() == {
        "status": "open",
        "session_id": "sess-1",
        "source": "flights",
        "event_type": "SchemaDrift",
        "event": {
            "source": "flights",
            "session_id": "sess-1",
            "detail": "",
            "missing_fields": ["price"],
        },
        "occurrences": 2,
        "reason": "SchemaDrift from flights (2 times)",
        "created_at": clock.now,
    }
    # The count starts over after an escalation; reset() forgets a source.
    assert await escalate(drift) is None
    escalate.reset("flights", "sess-1")
    assert await escalate(drift) is None


async def test_escalation_never_overwrites_a_queue_entry(clock: FakeClock) -> None:
    store = MemoryStore(clock=clock)
    escalate = EscalateToHuman(store, clock=clock, new_id=lambda: "same")
    await escalate(HandoverRequested(source="loop", session_id="s", detail="needs a human"))
    with pytest.raises(StaleStateError, match="expected version 0"):
        await escalate(HandoverRequested(source="loop", session_id="s"))
    record = await store.record_get(HANDOVER_NAMESPACE, "s/same")
    assert (
        record is not None
        and record.value["reason"] == "HandoverRequested from loop: needs a human"
    )


async def test_install_healing_wires_the_default_policy(clock: FakeClock) -> None:
    store = MemoryStore(clock=clock)
    bus = EventBus()
    strategies = install_healing(bus, store, circuit_clock=clock, clock=clock)

    kinds = [
        [a.kind for a in (await bus.publish(RateLimited(source="api"))).results_of(HealingAction)]
        for _ in range(5)
    ]
    assert kinds[:4] == [[HealingKind.USE_CACHE]] * 4
    assert kinds[4] == [HealingKind.USE_CACHE, HealingKind.OPEN_CIRCUIT]
    assert strategies.circuit.breaker("api").state is CircuitState.OPEN

    timeout = await bus.publish(TimeoutEvent(source="slow", timeout_s=1.0))
    assert [a.kind for a in timeout.results_of(HealingAction)] == [HealingKind.WIDEN_TIMEOUT]

    drift_kinds = []
    for _ in range(3):
        delivery = await bus.publish(SchemaDrift(source="api", session_id="s1"))
        drift_kinds.append([a.kind for a in delivery.results_of(HealingAction)])
    assert drift_kinds[2] == [HealingKind.USE_CACHE, HealingKind.ESCALATE]

    handover = await bus.publish(HandoverRequested(source="loop", session_id="s2"))
    assert [a.kind for a in handover.results_of(HealingAction)] == [HealingKind.ESCALATE]
    queue = await store.record_list(HANDOVER_NAMESPACE)
    assert sorted(r.value["session_id"] for r in queue) == ["s1", "s2"]  # type: ignore[type-var]

    # Empty results are the decision layer's business (ask or widen the query).
    assert not (await bus.publish(EmptyResult(source="api"))).handled


def test_healing_action_is_immutable_and_json_only() -> None:
    action = HealingAction(HealingKind.USE_CACHE, {"source": "x", "list": [1, 2]}, "why")
    with pytest.raises(TypeError):
        action.params["source"] = "y"  # type: ignore[index]
    assert action.params["list"] == (1, 2)
    assert action.to_dict() == {
        "kind": "use_cache",
        "params": {"source": "x", "list": [1, 2]},
        "reason": "why",
    }
    with pytest.raises(StateSerializationError, match=r"params\['bad'\]"):
        HealingAction(HealingKind.ESCALATE, {"bad": {1}}, "why")  # type: ignore[dict-item]
    with pytest.raises(ConfigurationError, match="kind"):
        HealingAction("use_cache", {}, "why")  # type: ignore[arg-type]


def test_event_payload_handles_any_event() -> None:
    class Model(BaseModel):
        source: str
        status: int

    @dataclass
    class Odd:
        source: str
        tags: set[str]
        ratio: float

    class Plain:
        def __init__(self) -> None:
            self.source = "p"
            self.error = ValueError("x")

    assert event_payload(Model(source="m", status=429)) == {"source": "m", "status": 429}
    assert event_payload(Odd("o", {"a"}, float("nan"))) == {
        "source": "o",
        "tags": ["a"],
        "ratio": "nan",
    }
    assert event_payload(Plain()) == {"source": "p", "error": "ValueError('x')"}
    assert event_payload(42) == {"repr": "42"}
