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
from collections.abc import Coroutine, Mapping, Sequence
from typing import Any, TypeVar

from ._protocol import Completion, MessagesInput, Model

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
    model: Model,
    messages: MessagesInput,
    *,
    response_schema: Mapping[str, Any] | None = None,
    max_tokens: int = 256,
    temperature: float = 0.0,
    stop: str | Sequence[str] | None = None,
    seed: int | None = None,
    timeout: float | None = None,
    tools: Sequence[Mapping[str, Any]] | None = None,
    call_id: str | None = None,
) -> Completion:
    """``model.complete(...)``, blocking."""
    return run_sync(
        model.complete(
            messages,
            response_schema=response_schema,
            max_tokens=max_tokens,
            temperature=temperature,
            stop=stop,
            seed=seed,
            timeout=timeout,
            tools=tools,
            call_id=call_id,
        )
    )


class SyncModel:
    """A blocking face on an async model: ``SyncModel(model).complete(messages, ...)``."""

    def __init__(self, model: Model) -> None:
        self.model = model

    @property
    def name(self) -> str:
        return self.model.name

    def complete(
        self,
        messages: MessagesInput,
        *,
        response_schema: Mapping[str, Any] | None = None,
        max_tokens: int = 256,
        temperature: float = 0.0,
        stop: str | Sequence[str] | None = None,
        seed: int | None = None,
        timeout: float | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        call_id: str | None = None,
    ) -> Completion:
        """Blocking ``complete``; same arguments as ``Model.complete``."""
        return complete_sync(
            self.model,
            messages,
            response_schema=response_schema,
            max_tokens=max_tokens,
            temperature=temperature,
            stop=stop,
            seed=seed,
            timeout=timeout,
            tools=tools,
            call_id=call_id,
        )

    def __repr__(self) -> str:
        return f"SyncModel({self.model!r})"
