"""``StoreProxy``: a state store in front of another, forwarding every call to it.

A tenant's scoped view, writes that wait for the next save, the ledger's riding commits:
each changes one thing about a store. Built on ``StoreProxy`` each overrides that one
thing and inherits the rest, so the store interface is spelled once here and once in the
protocol, as ``WrapperModel`` is for models. What a proxy may change:

- the names it passes in and hands back (``_session_id``, ``_namespace``,
  ``_outward_snapshot``, ``_outward_record``: the identity here; a scoped view prefixes
  and strips them);
- what happens before a write reaches the wrapped store (``flush``: nothing here; a view
  holding writes back writes them first, so writes keep their order);
- any method outright.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ._store import Record, Snapshot, StateStore

__all__ = ["StoreProxy"]


class StoreProxy:
    """Forwards the :class:`StateStore` interface and ``record_put_fenced`` to ``store``.

    A subclass sets ``self.store`` (the constructor here does) and overrides what it
    changes; ``close`` closes the wrapped store unless a subclass says otherwise.
    """

    store: StateStore

    def __init__(self, store: StateStore) -> None:
        self.store = store

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.store!r})"

    # --- what a subclass changes (the identity here) ------------------------------------

    def _session_id(self, session_id: str) -> str:
        return session_id

    def _namespace(self, namespace: str) -> str:
        return namespace

    def _outward_snapshot(self, snapshot: Snapshot) -> Snapshot:
        return snapshot

    def _outward_record(self, record: Record) -> Record:
        return record

    async def flush(self) -> None:
        """Write what this view holds back (it holds nothing); called before every write."""
        return None

    # --- sessions ------------------------------------------------------------------------

    async def create(
        self, session_id: str, data: Mapping[str, Any] | None = None, *, ttl_s: float | None = None
    ) -> Snapshot:
        """Start a session (see :meth:`StateStore.create`)."""
        await self.flush()
        made = await self.store.create(self._session_id(session_id), data, ttl_s=ttl_s)
        return self._outward_snapshot(made)

    async def get(self, session_id: str) -> Snapshot:
        """Read a session (see :meth:`StateStore.get`)."""
        return self._outward_snapshot(await self.store.get(self._session_id(session_id)))

    async def put(
        self,
        session_id: str,
        data: Mapping[str, Any],
        *,
        expected_version: int,
        field_ttl_s: Mapping[str, float] | None = None,
    ) -> Snapshot:
        """Compare-and-set a session (see :meth:`StateStore.put`)."""
        await self.flush()
        written = await self.store.put(
            self._session_id(session_id),
            data,
            expected_version=expected_version,
            field_ttl_s=field_ttl_s,
        )
        return self._outward_snapshot(written)

    async def update(
        self,
        session_id: str,
        fn: Callable[[Snapshot], Mapping[str, Any]],
        *,
        max_attempts: int = 16,
    ) -> Snapshot:
        """The wrapped store's read-modify-CAS loop; ``fn`` sees this view's snapshot."""
        await self.flush()
        written = await self.store.update(
            self._session_id(session_id),
            lambda s: fn(self._outward_snapshot(s)),
            max_attempts=max_attempts,
        )
        return self._outward_snapshot(written)

    async def delete(self, session_id: str) -> bool:
        """Remove a session (see :meth:`StateStore.delete`)."""
        await self.flush()
        return await self.store.delete(self._session_id(session_id))

    async def gc(self) -> int:
        """Expiry is the wrapped store's business: collect it there."""
        return await self.store.gc()

    # --- records -------------------------------------------------------------------------

    async def record_get(self, namespace: str, key: str) -> Record | None:
        """Read a record (see :meth:`StateStore.record_get`)."""
        record = await self.store.record_get(self._namespace(namespace), key)
        return None if record is None else self._outward_record(record)

    async def record_put(
        self,
        namespace: str,
        key: str,
        value: Mapping[str, Any],
        *,
        expected_version: int | None = None,
    ) -> Record:
        """Write a record (same version rules as :meth:`StateStore.record_put`)."""
        await self.flush()
        written = await self.store.record_put(
            self._namespace(namespace), key, value, expected_version=expected_version
        )
        return self._outward_record(written)

    async def record_put_fenced(
        self,
        namespace: str,
        key: str,
        value: Mapping[str, Any],
        *,
        token: int,
        fence: str = "fence",
    ) -> Record:
        """Write a record if it still carries fencing token ``token`` (``BaseStore``'s)."""
        await self.flush()
        written: Record = await self.store.record_put_fenced(  # type: ignore[attr-defined]
            self._namespace(namespace), key, value, token=token, fence=fence
        )
        return self._outward_record(written)

    async def record_list(self, namespace: str, prefix: str = "") -> list[Record]:
        """Records of ``namespace`` whose key starts with ``prefix``, ordered by key."""
        listed = await self.store.record_list(self._namespace(namespace), prefix)
        return [self._outward_record(r) for r in listed]

    async def record_delete(self, namespace: str, key: str) -> bool:
        """Remove a record (see :meth:`StateStore.record_delete`)."""
        await self.flush()
        return await self.store.record_delete(self._namespace(namespace), key)

    async def close(self) -> None:
        """Close the wrapped store."""
        await self.store.close()
