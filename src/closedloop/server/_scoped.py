"""A tenant's view of the shared state store: every id and namespace under one prefix.

The service gives each API key a :class:`ScopedStore` over the one shared store, and
builds that key's agents on it. Sessions, runs, task states, the controllers' history,
the effect ledger, past successes and the handover queue of one key then live under a
prefix no other key can name, so isolation holds by construction rather than by a
check remembered in every handler (a suggested fix drawn from "the nearest past
success" can only come from the same key's own runs).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .._exceptions import ConfigurationError
from ..feedback import Record, Snapshot, StateStore

__all__ = ["ScopedStore"]

_SEPARATOR = ":"


class ScopedStore:
    """A :class:`StateStore` that prefixes session ids and record namespaces with ``scope``.

    Reads come back with the prefix removed, so code on top sees its own ids. ``close``
    does nothing: the shared store belongs to whoever opened it.
    """

    def __init__(self, inner: StateStore, scope: str) -> None:
        if not isinstance(scope, str) or not scope or _SEPARATOR in scope:
            raise ConfigurationError("scope", scope, f"must be non-empty, without {_SEPARATOR!r}")
        self.inner = inner
        self.scope = scope
        self._prefix = scope + _SEPARATOR

    def __repr__(self) -> str:
        return f"ScopedStore({self.inner!r}, scope={self.scope!r})"

    def _sid(self, session_id: str) -> str:
        if not isinstance(session_id, str) or not session_id:
            raise ConfigurationError("session_id", session_id, "must be a non-empty string")
        return self._prefix + session_id

    def _ns(self, namespace: str) -> str:
        if not isinstance(namespace, str) or not namespace:
            raise ConfigurationError("namespace", namespace, "must be a non-empty string")
        return self._prefix + namespace

    def _snapshot(self, snapshot: Snapshot) -> Snapshot:
        return dataclasses.replace(snapshot, session_id=snapshot.session_id[len(self._prefix) :])

    def _record(self, record: Record) -> Record:
        return dataclasses.replace(record, namespace=record.namespace[len(self._prefix) :])

    # --- sessions ------------------------------------------------------------------------

    async def create(
        self, session_id: str, data: Mapping[str, Any] | None = None, *, ttl_s: float | None = None
    ) -> Snapshot:
        """Create a session in this scope."""
        return self._snapshot(await self.inner.create(self._sid(session_id), data, ttl_s=ttl_s))

    async def get(self, session_id: str) -> Snapshot:
        """Read a session of this scope."""
        return self._snapshot(await self.inner.get(self._sid(session_id)))

    async def put(
        self,
        session_id: str,
        data: Mapping[str, Any],
        *,
        expected_version: int,
        field_ttl_s: Mapping[str, float] | None = None,
    ) -> Snapshot:
        """Compare-and-set a session of this scope."""
        written = await self.inner.put(
            self._sid(session_id), data, expected_version=expected_version, field_ttl_s=field_ttl_s
        )
        return self._snapshot(written)

    async def update(
        self,
        session_id: str,
        fn: Callable[[Snapshot], Mapping[str, Any]],
        *,
        max_attempts: int = 16,
    ) -> Snapshot:
        """The shared read-modify-CAS loop; ``fn`` sees the unprefixed snapshot."""
        written = await self.inner.update(
            self._sid(session_id), lambda s: fn(self._snapshot(s)), max_attempts=max_attempts
        )
        return self._snapshot(written)

    async def delete(self, session_id: str) -> bool:
        """Delete a session of this scope."""
        return await self.inner.delete(self._sid(session_id))

    async def gc(self) -> int:
        """Expiry is the shared store's business: collect it there (for every scope)."""
        return await self.inner.gc()

    # --- records -------------------------------------------------------------------------

    async def record_get(self, namespace: str, key: str) -> Record | None:
        """Read a record of this scope."""
        record = await self.inner.record_get(self._ns(namespace), key)
        return None if record is None else self._record(record)

    async def record_put(
        self,
        namespace: str,
        key: str,
        value: Mapping[str, Any],
        *,
        expected_version: int | None = None,
    ) -> Record:
        """Write a record of this scope (same version rules as the shared store)."""
        written = await self.inner.record_put(
            self._ns(namespace), key, value, expected_version=expected_version
        )
        return self._record(written)

    async def record_put_fenced(
        self,
        namespace: str,
        key: str,
        value: Mapping[str, Any],
        *,
        token: int,
        fence: str = "fence",
    ) -> Record:
        """Write a record of this scope if it still carries fencing token ``token``."""
        written = await self.inner.record_put_fenced(  # type: ignore[attr-defined]
            self._ns(namespace), key, value, token=token, fence=fence
        )
        return self._record(written)

    async def record_list(self, namespace: str, prefix: str = "") -> list[Record]:
        """Records of this scope's ``namespace`` whose key starts with ``prefix``."""
        return [self._record(r) for r in await self.inner.record_list(self._ns(namespace), prefix)]

    async def record_delete(self, namespace: str, key: str) -> bool:
        """Delete a record of this scope."""
        return await self.inner.record_delete(self._ns(namespace), key)

    # --- several writes at once: the shared store's, so its one transaction holds ---------
    # Without these a run on this view would pay a synced commit for every hint and three
    # for each ledger commit, where the shared store writes them with the step's save.

    async def record_put_many(
        self, items: Sequence[tuple[str, str, Mapping[str, Any], int | None]]
    ) -> list[Record]:
        """Conditional record writes of this scope, as the shared store makes them."""
        scoped = [(self._ns(ns), key, value, expected) for ns, key, value, expected in items]
        many = getattr(self.inner, "record_put_many", None)
        if many is None:
            written = [
                await self.inner.record_put(ns, key, value, expected_version=expected)
                for ns, key, value, expected in scoped
            ]
        else:
            written = await many(scoped)
        return [self._record(r) for r in written]

    async def put_with_records(
        self,
        session_id: str,
        data: Mapping[str, Any],
        *,
        expected_version: int,
        records: Sequence[tuple[str, str, Mapping[str, Any]]] = (),
        writes: Sequence[tuple[str, str, Mapping[str, Any], int | None]] = (),
    ) -> Snapshot:
        """A session put of this scope with its records, as the shared store writes them
        (in one transaction where it can)."""
        together = getattr(self.inner, "put_with_records", None)
        if together is None:
            if writes:
                await self.record_put_many(writes)
            snapshot = await self.put(session_id, data, expected_version=expected_version)
            for namespace, key, value in records:
                await self.record_put(namespace, key, value)
            return snapshot
        written = await together(
            self._sid(session_id),
            data,
            expected_version=expected_version,
            records=[(self._ns(ns), key, value) for ns, key, value in records],
            writes=[(self._ns(ns), key, value, expected) for ns, key, value, expected in writes],
        )
        return self._snapshot(written)

    async def close(self) -> None:
        """Nothing to release: the shared store is closed by its owner."""
        return None
