"""``SyncStore``: a blocking facade over any async state store."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, Self, TypeVar

from .._exceptions import ConfigurationError, StoreUnavailableError
from ._contract import StateStore, StoreStats
from ._store import BaseStore

__all__ = ["SyncStore"]

_T = TypeVar("_T")
_P = ParamSpec("_P")


def blocking(
    method: Callable[Concatenate[Any, _P], Coroutine[Any, Any, _T]],
) -> Callable[Concatenate[SyncStore, _P], _T]:
    """``SyncStore``'s blocking twin of a store method: the same signature, without
    ``await``, the call handed to the loop thread."""
    op = method.__name__

    def call(self: SyncStore, /, *args: Any, **kwargs: Any) -> Any:
        target = getattr(self.store, op, None)
        if target is None:  # touch() is BaseStore's, not every StateStore's
            raise ConfigurationError("store", self.store, f"has no {op}()")
        return self._run(target(*args, **kwargs))

    call.__name__ = call.__qualname__ = op
    call.__doc__ = method.__doc__
    return call


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

    # --- the StateStore interface, each method blocking on the store's own -------------

    create = blocking(StateStore.create)
    get = blocking(StateStore.get)
    put = blocking(StateStore.put)
    update = blocking(StateStore.update)
    touch = blocking(BaseStore.touch)
    delete = blocking(StateStore.delete)
    gc = blocking(StateStore.gc)
    record_get = blocking(StateStore.record_get)
    record_put = blocking(StateStore.record_put)
    record_list = blocking(StateStore.record_list)
    record_delete = blocking(StateStore.record_delete)

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
