"""Blocking calls into the async models, for scripts, notebooks and the CLI.

One background event loop per process runs every sync call: async clients (the openai SDK
keeps a connection pool bound to a loop) then always see the same loop, and a sync call
made from inside a running loop does not deadlock it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from ._completion import Completion, MessagesInput
from ._protocol import Model
from ._request import DEFAULT_REQUEST, ModelRequest
from ._wrapper import WrapperModel

__all__ = ["SyncModel", "complete_sync", "run_sync"]

T = TypeVar("T")
_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None


def _background_loop() -> asyncio.AbstractEventLoop:
    global _loop
    with _lock:
        if _loop is None or _loop.is_closed():
            loop = asyncio.new_event_loop()
            thread = threading.Thread(
                target=loop.run_forever, name="closedloop-sync-models", daemon=True
            )
            thread.start()
            _loop = loop
        return _loop


def run_sync(coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
    """Run ``coro`` on the shared background loop and wait for its result.

    The caller's context variables travel with it, so ``usage_scope()`` still counts.
    """
    loop = _background_loop()
    context = contextvars.copy_context()
    result: concurrent.futures.Future[T] = concurrent.futures.Future()

    def finish(task: asyncio.Task[T]) -> None:
        if task.cancelled():
            result.cancel()
        elif (error := task.exception()) is not None:
            result.set_exception(error)
        else:
            result.set_result(task.result())

    def start() -> None:
        loop.create_task(coro, context=context).add_done_callback(finish)

    loop.call_soon_threadsafe(start)
    return result.result(timeout)


def complete_sync(
    model: Model, messages: MessagesInput, request: ModelRequest = DEFAULT_REQUEST
) -> Completion:
    """``await model.complete(messages, request)``, blocking."""
    return run_sync(model.complete(messages, request))


class SyncModel(WrapperModel):
    """A blocking face on an async model: ``SyncModel(model).complete_sync(messages, request)``.

    It stays a model: ``await sync_model.complete(...)`` still works from async code, so
    the same object can be handed to an agent and called from a script.
    """

    def complete_sync(
        self, messages: MessagesInput, request: ModelRequest = DEFAULT_REQUEST
    ) -> Completion:
        """Blocking ``complete``, on the shared background loop."""
        return complete_sync(self, messages, request)

    def close(self) -> None:
        """Blocking ``aclose``."""
        run_sync(self.aclose())
