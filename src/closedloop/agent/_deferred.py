"""Records that ride along with the next state save instead of a commit of their own.

The PID history of each step type and the memory of past successes are written every
step. On a durable store each such write is one synced commit, several per step, each
costing more than the whole rest of the step. They are hints (a warm start, a suggestion
for a human), not guarantees: :class:`DeferredRecords` keeps them in memory and hands
them to the next task-state save, which writes them in the same transaction when the
store can (``put_with_records``). A crash loses at most the hints of the step that was
not saved, the same step a recovery redoes anyway. Effects, the ledger and the task state
itself are never deferred.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

from ..feedback import Record, Snapshot, StateStore
from ..feedback._json import check_json, freeze_mapping

__all__ = ["DeferredRecords", "PendingRecord"]

PendingRecord = tuple[str, str, dict[str, Any]]
"""``(namespace, key, value)`` of a record waiting for the next save."""


class DeferredRecords:
    """A :class:`StateStore` view whose unconditional record writes in ``namespaces`` wait.

    Reads see the waiting writes over the store's own records; everything else goes
    straight to ``store``. :meth:`drain` takes the waiting writes for a save,
    :meth:`requeue` puts them back when that save failed, :meth:`flush` writes them alone.
    """

    def __init__(self, store: StateStore, namespaces: Collection[str]) -> None:
        self.store = store
        self.namespaces = frozenset(namespaces)
        self._pending: dict[tuple[str, str], Record] = {}
        clock = getattr(store, "_now", None)  # a BaseStore's clock, so ages compare
        self._clock: Callable[[], float] | None = clock if callable(clock) else None
        self._tick = 0.0

    def __repr__(self) -> str:
        return f"DeferredRecords({self.store!r}, waiting={len(self._pending)})"

    @property
    def waiting(self) -> int:
        """How many record writes wait for the next save."""
        return len(self._pending)

    def drain(self) -> list[PendingRecord]:
        """Take every waiting write (in the order they were made)."""
        out = [(r.namespace, r.key, dict(r.value)) for r in self._pending.values()]
        self._pending.clear()
        return out

    def requeue(self, items: list[PendingRecord]) -> None:
        """Put back writes a failed save did not make; newer waiting writes win."""
        for namespace, key, value in items:
            if (namespace, key) not in self._pending:
                self._pending[(namespace, key)] = self._record(namespace, key, value)

    async def flush(self) -> None:
        """Write the waiting records now, each on its own (when no save will follow)."""
        for namespace, key, value in self.drain():
            await self.store.record_put(namespace, key, value)

    def _now(self) -> float:
        if self._clock is not None:
            return float(self._clock())
        self._tick += 1.0  # order only: the memory trims by age
        return self._tick

    def _record(self, namespace: str, key: str, value: Mapping[str, Any]) -> Record:
        return Record(
            namespace=namespace,
            key=key,
            version=0,  # not stored yet
            value=freeze_mapping(value),
            updated_at=self._now(),
        )

    # --- sessions: straight through -------------------------------------------------------

    async def create(
        self, session_id: str, data: Mapping[str, Any] | None = None, *, ttl_s: float | None = None
    ) -> Snapshot:
        return await self.store.create(session_id, data, ttl_s=ttl_s)

    async def get(self, session_id: str) -> Snapshot:
        return await self.store.get(session_id)

    async def put(
        self,
        session_id: str,
        data: Mapping[str, Any],
        *,
        expected_version: int,
        field_ttl_s: Mapping[str, float] | None = None,
    ) -> Snapshot:
        return await self.store.put(
            session_id, data, expected_version=expected_version, field_ttl_s=field_ttl_s
        )

    async def update(
        self,
        session_id: str,
        fn: Callable[[Snapshot], Mapping[str, Any]],
        *,
        max_attempts: int = 16,
    ) -> Snapshot:
        return await self.store.update(session_id, fn, max_attempts=max_attempts)

    async def delete(self, session_id: str) -> bool:
        return await self.store.delete(session_id)

    async def gc(self) -> int:
        return await self.store.gc()

    async def close(self) -> None:
        await self.flush()

    # --- records ------------------------------------------------------------------------

    async def record_get(self, namespace: str, key: str) -> Record | None:
        waiting = self._pending.get((namespace, key))
        if waiting is not None:
            return waiting
        return await self.store.record_get(namespace, key)

    async def record_put(
        self,
        namespace: str,
        key: str,
        value: Mapping[str, Any],
        *,
        expected_version: int | None = None,
    ) -> Record:
        if namespace not in self.namespaces or expected_version is not None:
            return await self.store.record_put(
                namespace, key, value, expected_version=expected_version
            )
        # Checked now, so a bad value fails here and not inside a later, unrelated save.
        plain = check_json(value, "value")
        record = self._record(namespace, key, plain)
        self._pending.pop((namespace, key), None)
        self._pending[(namespace, key)] = record
        return record

    async def record_list(self, namespace: str, prefix: str = "") -> list[Record]:
        stored = await self.store.record_list(namespace, prefix)
        if namespace not in self.namespaces:
            return stored
        merged = {r.key: r for r in stored}
        for (ns, key), record in self._pending.items():
            if ns == namespace and key.startswith(prefix):
                merged[key] = record
        return [merged[k] for k in sorted(merged)]

    async def record_delete(self, namespace: str, key: str) -> bool:
        waiting = self._pending.pop((namespace, key), None)
        stored = await self.store.record_delete(namespace, key)
        return stored or waiting is not None
