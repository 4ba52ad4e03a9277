"""Built-in healing strategies: small objects registered on an ``EventBus``.

Each strategy answers a fault event with a typed :class:`HealingAction` the loop applies
(serve from cache, widen a timeout, stop calling a source, hand over to a human), so the
loop dispatches on types once, at registration, instead of branching on error kinds.
"""

from __future__ import annotations

import dataclasses
import math
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from .._exceptions import ConfigurationError
from .._faults import HandoverRequested, RateLimited, SchemaDrift, ServerError, TimeoutEvent
from .._validation import require_int_at_least, require_positive
from ._bus import EventBus
from ._circuit import CircuitBreaker, CircuitState
from ._contract import StateStore
from ._handover import HANDOVER_NAMESPACE, escalation_record
from ._json import JSONValue, check_json, freeze_mapping, thaw

__all__ = [
    "EscalateToHuman",
    "HealingAction",
    "HealingKind",
    "HealingStrategies",
    "OpenCircuit",
    "SwitchToCache",
    "WidenTimeout",
    "event_payload",
    "install_healing",
]


class SourcedEvent(Protocol):
    """What a strategy needs from an event: the source it concerns."""

    @property
    def source(self) -> str: ...


class HealingKind(StrEnum):
    """What the loop should do."""

    USE_CACHE = "use_cache"
    WIDEN_TIMEOUT = "widen_timeout"
    OPEN_CIRCUIT = "open_circuit"
    ESCALATE = "escalate"


@dataclass(frozen=True, slots=True)
class HealingAction:
    """A decision for the loop to apply: ``kind``, JSON ``params``, and the ``reason``."""

    kind: HealingKind
    params: Mapping[str, JSONValue]
    reason: str

    def __post_init__(self) -> None:
        if not isinstance(self.kind, HealingKind):
            raise ConfigurationError("kind", self.kind, "must be a HealingKind")
        frozen = freeze_mapping(check_json(dict(self.params), "params"))
        object.__setattr__(self, "params", frozen)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict for traces."""
        return {"kind": self.kind.value, "params": thaw(self.params), "reason": self.reason}


def _jsonable(value: Any, depth: int = 0) -> Any:
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if depth > 20:
        return repr(value)
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_jsonable(v, depth + 1) for v in value]
    return repr(value)


def event_payload(event: object) -> dict[str, Any]:
    """A JSON-ready description of any event (dataclass, pydantic model, or plain object)."""
    if dataclasses.is_dataclass(event) and not isinstance(event, type):
        fields = {f.name: getattr(event, f.name) for f in dataclasses.fields(event)}
    elif callable(getattr(event, "model_dump", None)):
        fields = event.model_dump(mode="json")  # type: ignore[attr-defined]
    elif hasattr(event, "__dict__"):
        fields = dict(vars(event))
    else:
        fields = {"repr": repr(event)}
    payload: dict[str, Any] = _jsonable(fields)
    return payload


def _session_of(event: object) -> str | None:
    session = getattr(event, "session_id", None)
    return session if isinstance(session, str) and session else None


@dataclass(frozen=True, slots=True)
class SwitchToCache:
    """Serve ``source``'s cached value instead of calling it (429, 5xx, timeouts).

    ``max_age_s`` bounds how old a cached value may be (None: any age); a rate-limit's
    ``retry_after_s`` is passed on so the loop knows when to call the source again.
    """

    max_age_s: float | None = None

    def __post_init__(self) -> None:
        if self.max_age_s is not None:
            require_positive("max_age_s", self.max_age_s)

    def __call__(self, event: SourcedEvent) -> HealingAction:
        retry_after = getattr(event, "retry_after_s", None)
        params: dict[str, Any] = {"source": event.source, "max_age_s": self.max_age_s}
        reason = f"{type(event).__name__} from {event.source}: serve the cached value"
        if isinstance(retry_after, int | float):
            params["retry_after_s"] = float(retry_after)
            reason += f" for the next {retry_after:g}s"
        return HealingAction(HealingKind.USE_CACHE, params, reason)


@dataclass(frozen=True, slots=True)
class WidenTimeout:
    """After a timeout, give ``source`` ``factor`` times the timeout it had, up to ``cap_s``.

    The event's ``timeout_s`` is the timeout that was exceeded (``default_s`` when it
    does not say). The loop should apply the result as a floor over the dynamic timeout.
    """

    factor: float = 1.5
    cap_s: float = 30.0
    default_s: float = 2.0

    def __post_init__(self) -> None:
        require_positive("cap_s", self.cap_s)
        require_positive("default_s", self.default_s)
        if require_positive("factor", self.factor) <= 1.0:
            raise ConfigurationError("factor", self.factor, "must be > 1 to widen anything")

    def __call__(self, event: SourcedEvent) -> HealingAction:
        given = getattr(event, "timeout_s", None)
        previous = float(given) if isinstance(given, int | float) and given > 0 else self.default_s
        widened = min(self.cap_s, previous * self.factor)
        return HealingAction(
            HealingKind.WIDEN_TIMEOUT,
            {"source": event.source, "timeout_s": widened, "previous_timeout_s": previous},
            f"{type(event).__name__} from {event.source} at {previous:g}s: "
            f"widen the timeout to {widened:g}s",
        )


class OpenCircuit:
    """Count each fault event as a failure of its source's :class:`CircuitBreaker`.

    While the source's breaker is open, answer with an ``open_circuit`` action (stop
    calling the source until ``retry_at``). The breakers are shared: tools should call
    through ``strategy.breaker(source)`` so their successes close it again.
    """

    def __init__(
        self,
        *,
        failure_threshold: int = 5,
        recovery_timeout_s: float = 30.0,
        half_open_probes: int = 1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        # Built once to validate the settings where they are given.
        CircuitBreaker(
            failure_threshold=failure_threshold,
            recovery_timeout_s=recovery_timeout_s,
            half_open_probes=half_open_probes,
        )
        self._settings = (failure_threshold, recovery_timeout_s, half_open_probes)
        self._clock = clock
        self._breakers: dict[str, CircuitBreaker] = {}

    def __repr__(self) -> str:
        return f"OpenCircuit(sources={sorted(self._breakers)})"

    def breaker(self, source: str) -> CircuitBreaker:
        """The breaker of ``source``, created on first use."""
        found = self._breakers.get(source)
        if found is None:
            threshold, recovery, probes = self._settings
            found = self._breakers[source] = CircuitBreaker(
                source,
                failure_threshold=threshold,
                recovery_timeout_s=recovery,
                half_open_probes=probes,
                clock=self._clock,
            )
        return found

    def __call__(self, event: SourcedEvent) -> HealingAction | None:
        breaker = self.breaker(event.source)
        breaker.record_failure()
        if breaker.state is not CircuitState.OPEN:
            return None
        return HealingAction(
            HealingKind.OPEN_CIRCUIT,
            {
                "source": event.source,
                "retry_at": breaker.retry_at,
                "recovery_timeout_s": breaker.recovery_timeout_s,
            },
            f"{type(event).__name__} from {event.source}: circuit open, "
            f"stop calling it for {breaker.recovery_timeout_s:g}s",
        )


class EscalateToHuman:
    """Put the task in the human handover queue after ``after`` events from one source.

    Writes a record in ``store``'s ``"handover"`` namespace, keyed ``<session>/<id>``, with
    an audit payload (the event, its type, the reason, when, how many times; secrets
    redacted), claimed with ``expected_version=0`` so a queue entry is never overwritten.
    The record's format is :func:`escalation_record`'s; ``HandoverQueue`` lists it as a
    pending item a reviewer decides like any other.
    """

    def __init__(
        self,
        store: StateStore,
        *,
        after: int = 1,
        namespace: str = HANDOVER_NAMESPACE,
        clock: Callable[[], float] = time.time,
        new_id: Callable[[], str] = lambda: uuid.uuid4().hex,
    ) -> None:
        self.store = store
        self.after = require_int_at_least("after", after, 1)
        self.namespace = namespace
        self._clock = clock
        self._new_id = new_id
        self._counts: dict[tuple[str | None, str], int] = {}

    def __repr__(self) -> str:
        return f"EscalateToHuman(after={self.after}, namespace={self.namespace!r})"

    def reset(self, source: str, session_id: str | None = None) -> None:
        """Forget the events counted for ``source`` (e.g. after it recovered)."""
        self._counts.pop((session_id, source), None)

    async def __call__(self, event: SourcedEvent) -> HealingAction | None:
        session = _session_of(event)
        counter = (session, event.source)
        count = self._counts.get(counter, 0) + 1
        if count < self.after:
            self._counts[counter] = count
            return None
        self._counts.pop(counter, None)
        detail = getattr(event, "detail", "")
        reason = f"{type(event).__name__} from {event.source}" + (
            f" ({count} times)" if count > 1 else ""
        )
        if isinstance(detail, str) and detail:
            reason += f": {detail}"
        key = f"{session or '-'}/{self._new_id()}"
        await self.store.record_put(
            self.namespace,
            key,
            escalation_record(
                session_id=session,
                source=event.source,
                event_type=type(event).__name__,
                event=event_payload(event),
                occurrences=count,
                reason=reason,
                created_at=self._clock(),
            ),
            expected_version=0,
        )
        return HealingAction(
            HealingKind.ESCALATE,
            {"namespace": self.namespace, "key": key, "session_id": session},
            f"handed over to a human: {reason}",
        )


@dataclass(frozen=True, slots=True)
class HealingStrategies:
    """The strategy objects :func:`install_healing` registered, for inspection and reuse."""

    cache: SwitchToCache
    timeout: WidenTimeout
    circuit: OpenCircuit
    escalate: EscalateToHuman
    escalate_drift: EscalateToHuman


def install_healing(
    bus: EventBus,
    store: StateStore,
    *,
    circuit_clock: Callable[[], float] = time.monotonic,
    clock: Callable[[], float] = time.time,
    drift_escalation_after: int = 3,
) -> HealingStrategies:
    """Register the default healing policy on ``bus``.

    RateLimited and ServerError: serve from cache and count toward the source's breaker.
    TimeoutEvent: widen the timeout and count toward the breaker. SchemaDrift: serve from
    cache; escalate after ``drift_escalation_after`` drifts from one source.
    HandoverRequested: escalate at once.
    """
    strategies = HealingStrategies(
        cache=SwitchToCache(),
        timeout=WidenTimeout(),
        circuit=OpenCircuit(clock=circuit_clock),
        escalate=EscalateToHuman(store, clock=clock),
        escalate_drift=EscalateToHuman(store, after=drift_escalation_after, clock=clock),
    )
    for event_type in (RateLimited, ServerError):
        bus.subscribe(event_type, strategies.cache)
        bus.subscribe(event_type, strategies.circuit)
    bus.subscribe(TimeoutEvent, strategies.timeout)
    bus.subscribe(TimeoutEvent, strategies.circuit)
    bus.subscribe(SchemaDrift, strategies.cache)
    bus.subscribe(SchemaDrift, strategies.escalate_drift)
    bus.subscribe(HandoverRequested, strategies.escalate)
    return strategies
