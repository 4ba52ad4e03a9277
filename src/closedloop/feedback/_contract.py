"""The state store contract: ``Snapshot``, ``Record``, the ``StateStore`` protocol, its stats.

What every backend and every proxy promises, with the field-expiry rules they share; the
machinery that enforces the promises (checks, the JSON and size gate, the secret scrub,
the read-modify-CAS loop) is ``BaseStore``, in ``_store.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple, Protocol, runtime_checkable

from .._records import RecordStore
from ._json import JSONValue, thaw

__all__ = [
    "Hint",
    "Record",
    "RecordWrite",
    "SessionWrite",
    "Snapshot",
    "StateStore",
    "StoreStats",
    "Write",
    "live_fields",
    "merge_field_expiry",
]

_NO_EXPIRY: Mapping[str, float] = MappingProxyType({})

Hint = tuple[str, str, Mapping[str, Any]]
"""``(namespace, key, value)``: an unconditional record write that rides with a save."""

Write = tuple[str, str, Mapping[str, Any], int | None]
"""``(namespace, key, value, expected_version)``: a record write under the version rule."""


class SessionWrite(NamedTuple):
    """A checked compare-and-set of one session: what a backend's ``_put`` writes."""

    session_id: str
    expected: int
    plain: dict[str, Any]
    text: str  # ``plain`` as JSON, secrets scrubbed
    ttls: Mapping[str, float]  # the fields given a fresh TTL by this write


class RecordWrite(NamedTuple):
    """A checked record write: ``expected`` None writes unconditionally, 0 only if absent."""

    namespace: str
    key: str
    expected: int | None
    plain: dict[str, Any]
    text: str


@dataclass(frozen=True, slots=True)
class Snapshot:
    """An immutable view of one session's state at one version.

    ``data`` is read-only all the way down (objects are read-only mappings, arrays are
    tuples); :meth:`to_dict` gives a mutable copy to build the next version from.
    ``field_expires_at`` maps each field that has its own TTL to the time it disappears.
    """

    session_id: str
    version: int
    data: Mapping[str, JSONValue]
    created_at: float
    updated_at: float
    expires_at: float | None
    field_expires_at: Mapping[str, float] = field(default_factory=lambda: _NO_EXPIRY)

    def to_dict(self) -> dict[str, Any]:
        """A mutable deep copy of ``data`` (dicts and lists)."""
        return thaw(self.data)  # type: ignore[no-any-return]


@dataclass(frozen=True, slots=True)
class Record:
    """A small keyed document beside the sessions (effect ledger, handover queue, ...).

    ``version`` is 1 when the record is first written and grows by one on every write.
    """

    namespace: str
    key: str
    version: int
    value: Mapping[str, JSONValue]
    updated_at: float

    def to_dict(self) -> dict[str, Any]:
        """A mutable deep copy of ``value``."""
        return thaw(self.value)  # type: ignore[no-any-return]


@runtime_checkable
class StateStore(RecordStore[Record], Protocol):
    """Session-bound state with compare-and-set versions, TTLs, and keyed records.

    Every part of closedloop that keeps state talks to this protocol; ``MemoryStore``,
    ``SQLiteStore`` and ``RedisStore`` implement it. Values must be JSON-serialisable. The
    records half is :class:`~closedloop.execution.RecordStore`, the one the effect ledger
    writes through; the sessions are below. ``BaseStore`` implements both, and every
    wrapper (``StoreProxy``, ``SyncStore``) is built from these signatures, not a copy.
    """

    async def create(
        self, session_id: str, data: Mapping[str, Any] | None = None, *, ttl_s: float | None = None
    ) -> Snapshot:
        """Start a session at version 1; ``ConfigurationError`` if a live one has this id."""

    async def get(self, session_id: str) -> Snapshot:
        """The session's current snapshot; ``SessionNotFoundError`` if unknown or expired."""

    async def put(
        self,
        session_id: str,
        data: Mapping[str, Any],
        *,
        expected_version: int,
        field_ttl_s: Mapping[str, float] | None = None,
    ) -> Snapshot:
        """Replace the session's data if it is still at ``expected_version``."""

    async def update(
        self,
        session_id: str,
        fn: Callable[[Snapshot], Mapping[str, Any]],
        *,
        max_attempts: int = 16,
    ) -> Snapshot:
        """Read, apply ``fn`` to the snapshot, and compare-and-set the result."""

    async def delete(self, session_id: str) -> bool:
        """Remove the session; True if a live one was removed."""

    async def gc(self) -> int:
        """Delete expired sessions and expired fields; return how many of both were removed."""

    async def close(self) -> None:
        """Release the backend; later operations raise ``StoreUnavailableError``."""


@dataclass(frozen=True, slots=True)
class StoreStats:
    """Counters of one store object since it was opened (this process only)."""

    cas_retries: int = 0
    """``update`` attempts that lost a compare-and-set and read again."""
    cas_conflicts: int = 0
    """``StaleStateError``s raised by ``put`` and ``record_put`` (including inside ``update``)."""
    gc_sessions: int = 0
    """Expired sessions deleted by ``gc``."""
    gc_fields: int = 0
    """Expired fields deleted by ``gc``."""
    commits: int = 0
    """Write transactions committed (``SQLiteStore``: under ``synchronous="FULL"`` one fsync
    each). Writes that wait for the store together share one transaction (group commit),
    so one commit can carry several callers' writes; other stores count none."""


def live_fields(field_expires: Mapping[str, float], now: float) -> dict[str, float]:
    """The field expiries that have not passed at ``now``."""
    return {name: at for name, at in field_expires.items() if at > now}


def merge_field_expiry(
    old: Mapping[str, float],
    new_data: Mapping[str, Any],
    field_ttl_s: Mapping[str, float],
    now: float,
) -> dict[str, float]:
    """Field expiries after a put.

    A field keeps its expiry across writes (a loop that rewrites the whole document must
    not make a temporary field immortal) until it expires, is removed from the document,
    or is given a fresh TTL in ``field_ttl_s``.
    """
    merged = {name: at for name, at in old.items() if name in new_data and at > now}
    for name, ttl in field_ttl_s.items():
        merged[name] = now + ttl
    return merged
