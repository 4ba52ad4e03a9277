"""``MemoryStore``: the state store in a dict, for tests and single-process runs."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

from .._exceptions import ConfigurationError, SessionNotFoundError, StoreUnavailableError
from ._contract import Record, RecordWrite, SessionWrite, Snapshot, live_fields, merge_field_expiry
from ._json import JSONValue, freeze_mapping
from ._store import (
    DEFAULT_MAX_DOCUMENT_BYTES,
    BaseStore,
    record_name,
    stored_token,
    writes_together,
)

__all__ = ["MemoryStore"]


@dataclass(frozen=True, slots=True)
class _Session:
    version: int
    data: Mapping[str, JSONValue]  # may still hold expired fields until gc()
    field_expires: Mapping[str, float]
    created_at: float
    updated_at: float
    ttl_s: float | None
    expires_at: float | None

    def expired(self, now: float) -> bool:
        return self.expires_at is not None and now >= self.expires_at


def _snapshot(session_id: str, s: _Session, now: float) -> Snapshot:
    live = live_fields(s.field_expires, now)
    data = s.data
    if len(live) != len(s.field_expires):
        data = MappingProxyType(
            {k: v for k, v in s.data.items() if k in live or k not in s.field_expires}
        )
    return Snapshot(
        session_id=session_id,
        version=s.version,
        data=data,
        created_at=s.created_at,
        updated_at=s.updated_at,
        expires_at=s.expires_at,
        field_expires_at=MappingProxyType(live),
    )


class MemoryStore(BaseStore):
    """A :class:`StateStore` held in this process's memory.

    Snapshots share the stored deep-frozen data, so reads copy nothing. Every operation
    yields to the event loop once before it runs, as a networked store would: code that
    is only correct because nothing else ran between its ``get`` and its ``put`` fails
    here too, not first in production.
    """

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.time,
        max_document_bytes: int = DEFAULT_MAX_DOCUMENT_BYTES,
    ) -> None:
        super().__init__(clock=clock, max_document_bytes=max_document_bytes)
        self._sessions: dict[str, _Session] = {}
        # namespace -> key -> record: listing a namespace reads only its own records, not
        # every record the store holds (ledgers of finished runs pile up in a long process)
        self._records: dict[str, dict[str, Record]] = {}
        # A SyncStore drives the same object from its own loop thread.
        self._lock = threading.Lock()
        self._closed = False

    def __repr__(self) -> str:
        return f"MemoryStore(sessions={len(self._sessions)}, records={sum(map(len, self._records.values()))})"

    async def _enter(self) -> float:
        await asyncio.sleep(0)
        if self._closed:
            raise StoreUnavailableError("memory store is closed")
        return self._now()

    def _live(self, session_id: str, now: float) -> _Session:
        s = self._sessions.get(session_id)
        if s is None:
            raise SessionNotFoundError(f"session {session_id!r} not found")
        if s.expired(now):
            raise SessionNotFoundError(
                f"session {session_id!r} expired at {s.expires_at} (now {now})"
            )
        return s

    # --- sessions (the checks are BaseStore's) ------------------------------------------

    async def _create(
        self, session_id: str, plain: dict[str, Any], text: str, ttl: float | None
    ) -> Snapshot:
        now = await self._enter()
        with self._lock:
            old = self._sessions.get(session_id)
            if old is not None and not old.expired(now):
                raise ConfigurationError("session_id", session_id, "a session with this id exists")
            s = _Session(
                version=1,
                data=freeze_mapping(plain),
                field_expires=MappingProxyType({}),
                created_at=now,
                updated_at=now,
                ttl_s=ttl,
                expires_at=None if ttl is None else now + ttl,
            )
            self._sessions[session_id] = s
        return _snapshot(session_id, s, now)

    async def _get(self, session_id: str) -> Snapshot:
        now = await self._enter()
        with self._lock:
            s = self._live(session_id, now)
        return _snapshot(session_id, s, now)

    async def _put(self, write: SessionWrite) -> Snapshot:
        now = await self._enter()
        with self._lock:
            return self._put_locked(write, self._current(write, now), now)

    put_with_records = writes_together(BaseStore.put_with_records)

    async def _put_with_records(
        self, save: SessionWrite, hints: list[RecordWrite], writes: list[RecordWrite]
    ) -> Snapshot:
        # One turn of the loop for a step's save and its bookkeeping, all or nothing: the
        # session's version and every conditional write are checked before anything changes.
        now = await self._enter()
        with self._lock:
            old = self._current(save, now)
            versions = self._versions(writes)
            snapshot = self._put_locked(save, old, now)
            self._write_records(writes, versions, now)
            self._write_records(hints, self._versions(hints), now)
        return snapshot

    def _current(self, write: SessionWrite, now: float) -> _Session:
        old = self._live(write.session_id, now)
        if old.version != write.expected:
            raise self._stale(write.session_id, write.expected, old.version)
        return old

    def _put_locked(self, write: SessionWrite, old: _Session, now: float) -> Snapshot:
        session_id, _, plain, _, ttls = write
        # Built directly (every save comes here): ``replace`` would walk the fields for it.
        s = _Session(
            version=old.version + 1,
            data=freeze_mapping(plain),
            field_expires=MappingProxyType(merge_field_expiry(old.field_expires, plain, ttls, now)),
            created_at=old.created_at,
            updated_at=now,
            ttl_s=old.ttl_s,
            expires_at=old.expires_at,
        )
        self._sessions[session_id] = s
        return _snapshot(session_id, s, now)

    async def _touch(self, session_id: str, ttl: float | None) -> Snapshot:
        now = await self._enter()
        with self._lock:
            old = self._live(session_id, now)
            ttl = old.ttl_s if ttl is None else ttl
            s = replace(old, ttl_s=ttl, expires_at=None if ttl is None else now + ttl)
            self._sessions[session_id] = s
        return _snapshot(session_id, s, now)

    async def _delete(self, session_id: str) -> bool:
        now = await self._enter()
        with self._lock:
            s = self._sessions.pop(session_id, None)
        return s is not None and not s.expired(now)

    async def _gc(self) -> tuple[int, int]:
        now = await self._enter()
        sessions = fields = 0
        with self._lock:
            for session_id, s in list(self._sessions.items()):
                if s.expired(now):
                    del self._sessions[session_id]
                    sessions += 1
                    continue
                live = live_fields(s.field_expires, now)
                if len(live) == len(s.field_expires):
                    continue
                gone = s.field_expires.keys() - live.keys()
                fields += len(gone)
                self._sessions[session_id] = replace(
                    s,
                    data=MappingProxyType({k: v for k, v in s.data.items() if k not in gone}),
                    field_expires=MappingProxyType(live),
                )
        return sessions, fields

    # --- records -------------------------------------------------------------------------

    async def _record_get(self, namespace: str, key: str) -> Record | None:
        await self._enter()
        with self._lock:
            return self._records.get(namespace, {}).get(key)

    async def _record_put(self, write: RecordWrite) -> Record:
        return (await self._record_put_many([write]))[0]

    async def _record_put_many(self, checked: list[RecordWrite]) -> list[Record]:
        # All or none: every version is checked before anything is written.
        now = await self._enter()
        with self._lock:
            return self._write_records(checked, self._versions(checked), now)

    def _versions(self, checked: list[RecordWrite]) -> dict[tuple[str, str], int]:
        """Each record's version after ``checked``; raises on the first stale one."""
        versions: dict[tuple[str, str], int] = {}
        for namespace, key, expected, _, _ in checked:
            old = self._records.get(namespace, {}).get(key)
            actual = versions.get((namespace, key), None if old is None else old.version)
            if expected is not None and (actual or 0) != expected:
                raise self._stale(record_name(namespace, key), expected, actual)
            versions[(namespace, key)] = (actual or 0) + 1
        return versions

    def _write_records(
        self, checked: list[RecordWrite], versions: dict[tuple[str, str], int], now: float
    ) -> list[Record]:
        out = []
        for namespace, key, _, plain, _ in checked:
            record = Record(
                namespace=namespace,
                key=key,
                version=versions[(namespace, key)],
                value=freeze_mapping(plain),
                updated_at=now,
            )
            self._records.setdefault(namespace, {})[key] = record
            out.append(record)
        return out

    async def _record_put_fenced(self, write: RecordWrite, fence: str, token: int) -> Record:
        namespace, key, _, plain, _ = write
        now = await self._enter()
        with self._lock:
            old = self._records.get(namespace, {}).get(key)
            actual = stored_token(None if old is None else old.value, fence)
            if actual != token:
                raise self._fenced(record_name(namespace, key), token, actual)
            record = Record(
                namespace=namespace,
                key=key,
                version=(0 if old is None else old.version) + 1,
                value=freeze_mapping(plain),
                updated_at=now,
            )
            self._records.setdefault(namespace, {})[key] = record
        return record

    async def _record_list(self, namespace: str, prefix: str) -> list[Record]:
        await self._enter()
        with self._lock:
            found = [
                r for key, r in self._records.get(namespace, {}).items() if key.startswith(prefix)
            ]
        return sorted(found, key=lambda r: r.key)

    async def _record_delete(self, namespace: str, key: str) -> bool:
        await self._enter()
        with self._lock:
            records = self._records.get(namespace)
            if records is None or records.pop(key, None) is None:
                return False
            if not records:
                del self._records[namespace]
            return True

    async def close(self) -> None:
        """Refuse further operations. The data is dropped with the object."""
        self._closed = True
