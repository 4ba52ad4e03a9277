"""``SyncStore``: a blocking facade over any async state store."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, Self, TypeVar

from .._exceptions import ConfigurationError, StoreUnavailableError
from ._store import Record, Snapshot, StateStore, StoreStats

__all__ = ["SyncStore"]

_T = TypeVar("_T")


class SyncStore:
    """Call a :class:`StateStore` from synchronous code (scripts, a REPL, a sync CLI).

    The store runs on a private event loop in a background thread, so the facade works
    from any thread, including one whose own event loop is running (it then blocks that
    loop for the duration of the call, as any blocking call does).
    """

    def __init__(self, store: StateStore) -> None:
        if not isinstance(store, StateStore):
            raise ConfigurationError("store", store, "must implement the StateStore protocol")
        self.store = store
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="closedloop-syncstore", daemon=True
        )
        self._thread.start()
        self._closed = False

    def __repr__(self) -> str:
        return f"SyncStore({self.store!r})"

    def _run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        if self._closed:
            coro.close()
            raise StoreUnavailableError("SyncStore is closed")
        if threading.current_thread() is self._thread:
            coro.close()
            raise StoreUnavailableError("SyncStore called from its own loop thread (deadlock)")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    @property
    def stats(self) -> StoreStats:
        """The wrapped store's counters."""
        stats = getattr(self.store, "stats", None)
        return stats if isinstance(stats, StoreStats) else StoreStats()

    # Each method repeats its StateStore signature, without async, on purpose: typed
    # blocking twins, whose bodies only hand the call to the loop thread.

    def create(
        self, session_id: str, data: Mapping[str, Any] | None = None, *, ttl_s: float | None = None
    ) -> Snapshot:
        """See :meth:`StateStore.create`."""
        return self._run(self.store.create(session_id, data, ttl_s=ttl_s))

    def get(self, session_id: str) -> Snapshot:
        """See :meth:`StateStore.get`."""
        return self._run(self.store.get(session_id))

    def put(
        self,
        session_id: str,
        data: Mapping[str, Any],
        *,
        expected_version: int,
        field_ttl_s: Mapping[str, float] | None = None,
    ) -> Snapshot:
        """See :meth:`StateStore.put`."""
        return self._run(
            self.store.put(
                session_id, data, expected_version=expected_version, field_ttl_s=field_ttl_s
            )
        )

    def update(
        self,
        session_id: str,
        fn: Callable[[Snapshot], Mapping[str, Any]],
        *,
        max_attempts: int = 16,
    ) -> Snapshot:
        """See :meth:`StateStore.update`."""
        return self._run(self.store.update(session_id, fn, max_attempts=max_attempts))

    def touch(self, session_id: str, *, ttl_s: float | None = None) -> Snapshot:
        """Renew a session's TTL, where the wrapped store supports it."""
        touch = getattr(self.store, "touch", None)
        if touch is None:
            raise ConfigurationError("store", self.store, "has no touch()")
        snapshot: Snapshot = self._run(touch(session_id, ttl_s=ttl_s))
        return snapshot

    def delete(self, session_id: str) -> bool:
        """See :meth:`StateStore.delete`."""
        return self._run(self.store.delete(session_id))

    def gc(self) -> int:
        """See :meth:`StateStore.gc`."""
        return self._run(self.store.gc())

    def record_get(self, namespace: str, key: str) -> Record | None:
        """See :meth:`StateStore.record_get`."""
        return self._run(self.store.record_get(namespace, key))

    def record_put(
        self,
        namespace: str,
        key: str,
        value: Mapping[str, Any],
        *,
        expected_version: int | None = None,
    ) -> Record:
        """See :meth:`StateStore.record_put`."""
        return self._run(
            self.store.record_put(namespace, key, value, expected_version=expected_version)
        )

    def record_list(self, namespace: str, prefix: str = "") -> list[Record]:
        """See :meth:`StateStore.record_list`."""
        return self._run(self.store.record_list(namespace, prefix))

    def record_delete(self, namespace: str, key: str) -> bool:
        """See :meth:`StateStore.record_delete`."""
        return self._run(self.store.record_delete(namespace, key))

    def close(self) -> None:
        """Close the wrapped store and stop the loop thread. Idempotent."""
        if self._closed:
            return
        try:
            self._run(self.store.close())
        finally:
            self._closed = True
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            self._loop.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
