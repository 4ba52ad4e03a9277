"""The world's ground truth bookkeeping: request ids and indices, faults, effects, counters,
and the idempotency store. Thread-safe: the server writes from its event loop while a test
or benchmark reads from another thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, fields
from enum import StrEnum

from ._endpoints import ENDPOINTS
from ._injector import WorldFaultEvent, WorldFaultKind
from ._regimes import Regime, RegimeChange
from ._schemas import EffectCounters, WorldEffectRecord

__all__ = ["IdempotencyState", "Recorder", "StoredResponse"]


@dataclass(slots=True)
class _Counts:
    calls: int = 0
    faulted: int = 0
    effects: int = 0
    duplicates: int = 0
    replays: int = 0
    missing_idempotency_key: int = 0
    rejected: int = 0
    commit_then_fail: int = 0

    def frozen(self) -> EffectCounters:
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        return EffectCounters(distinct_effects=self.effects - self.duplicates, **values)


@dataclass(frozen=True, slots=True)
class StoredResponse:
    """The first answer to an idempotency key, replayed to every retry with that key."""

    status: int
    body: bytes
    media_type: str | None


class IdempotencyState(StrEnum):
    NEW = "new"
    REPLAY = "replay"
    MISMATCH = "mismatch"
    IN_PROGRESS = "in_progress"


@dataclass(slots=True)
class _Entry:
    body_hash: str
    response: StoredResponse | None = None  # None while the first request is running


class Recorder:
    """Counts and logs for one world; ``reset`` starts a new episode."""

    def __init__(self, clock: Callable[[], float], lock: threading.RLock) -> None:
        self._clock = clock
        self._lock = lock
        self.reset()

    def reset(self) -> None:
        with self._lock:
            self._t0 = self._clock()
            self._next_id = 0
            self._indices: dict[str, int] = {}
            self._service_indices: dict[str, int] = {}
            self._regime: dict[str, Regime] = {}
            self._regime_log: list[RegimeChange] = []
            self._faults: list[WorldFaultEvent] = []
            self._effects: list[WorldEffectRecord] = []
            self._counts = {n: _Counts() for n, s in ENDPOINTS.items() if s.mutating}
            self._idem: dict[tuple[str, str], _Entry] = {}

    def elapsed(self) -> float:
        """Seconds since the world started or was last reset."""
        return self._clock() - self._t0

    def next_request_id(self) -> str:
        with self._lock:
            self._next_id += 1
            return f"req-{self._next_id:06d}"

    def next_index(self, endpoint: str) -> int:
        """The 0-based index of a new request to ``endpoint``; counts the call."""
        with self._lock:
            index = self._indices.get(endpoint, 0)
            self._indices[endpoint] = index + 1
            if endpoint in self._counts:
                self._counts[endpoint].calls += 1
            return index

    def next_service_index(self, service: str) -> int:
        """The 0-based index of a new request to any endpoint of ``service``."""
        with self._lock:
            index = self._service_indices.get(service, 0)
            self._service_indices[service] = index + 1
            return index

    def note_regime(self, service: str, index: int, regime: Regime) -> None:
        """Log a regime change when ``service``'s request ``index`` is served in a regime
        other than its last one (every service starts healthy)."""
        with self._lock:
            last = self._regime.get(service, Regime.HEALTHY)
            if regime is not last:
                self._regime[service] = regime
                self._regime_log.append(
                    RegimeChange(
                        service=service,
                        index=index,
                        t_s=self.elapsed(),
                        from_regime=last,
                        to_regime=regime,
                    )
                )

    def regime_changes(self) -> tuple[RegimeChange, ...]:
        with self._lock:
            return tuple(self._regime_log)

    def log_fault(self, event: WorldFaultEvent) -> None:
        with self._lock:
            self._faults.append(event)

    def count(self, endpoint: str, counter: str) -> None:
        with self._lock:
            counts = self._counts.get(endpoint)
            if counts is not None:
                setattr(counts, counter, getattr(counts, counter) + 1)

    def record_effect(
        self,
        endpoint: str,
        target: str,
        *,
        duplicate: bool,
        request_id: str,
        idempotency_key: str | None,
    ) -> None:
        """Record one change to the world; ``duplicate`` if it repeats one already made."""
        with self._lock:
            counts = self._counts[endpoint]
            counts.effects += 1
            counts.duplicates += int(duplicate)
            self._effects.append(
                WorldEffectRecord(
                    request_id=request_id,
                    endpoint=endpoint,
                    target=target,
                    duplicate=duplicate,
                    idempotency_key=idempotency_key,
                    t_s=self.elapsed(),
                )
            )

    # --- idempotency -----------------------------------------------------------------

    def idempotency_begin(
        self, endpoint: str, key: str, body_hash: str
    ) -> tuple[IdempotencyState, StoredResponse | None]:
        """Claim ``key`` for a request, or say why not (replay, other body, still running)."""
        with self._lock:
            entry = self._idem.get((endpoint, key))
            if entry is None:
                self._idem[(endpoint, key)] = _Entry(body_hash)
                return IdempotencyState.NEW, None
            if entry.body_hash != body_hash:
                return IdempotencyState.MISMATCH, None
            if entry.response is None:
                return IdempotencyState.IN_PROGRESS, None
            return IdempotencyState.REPLAY, entry.response

    def idempotency_finish(self, endpoint: str, key: str, response: StoredResponse | None) -> None:
        """Store the answer to replay, or (None) release the key for a fresh attempt."""
        with self._lock:
            if response is None:
                self._idem.pop((endpoint, key), None)
            else:
                self._idem[(endpoint, key)].response = response

    # --- reading -----------------------------------------------------------------------

    def faults(
        self, endpoint: str | None = None, kind: WorldFaultKind | str | None = None
    ) -> tuple[WorldFaultEvent, ...]:
        with self._lock:
            return tuple(
                e
                for e in self._faults
                if (endpoint is None or e.endpoint == endpoint) and (kind is None or e.kind == kind)
            )

    def effects(self, endpoint: str | None = None) -> tuple[WorldEffectRecord, ...]:
        with self._lock:
            return tuple(e for e in self._effects if endpoint is None or e.endpoint == endpoint)

    def counters(self) -> dict[str, EffectCounters]:
        with self._lock:
            return {name: c.frozen() for name, c in self._counts.items()}

    def request_counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self._indices)
