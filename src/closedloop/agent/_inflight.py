"""Budgets and the race that ends a call in flight when the run must stop.

A deadline, an exhausted budget or a cancellation must end the run while a model or tool
call is still running, not after it returns (a hung call would otherwise hold the run
forever). Each call is raced against watchers; the first watcher to fire cancels the call.
The deadline watcher sleeps through an injected ``sleep``, so tests drive it with a fake
clock and never wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import math
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Protocol, TypeVar

from .._exceptions import ConfigurationError
from .._validation import require_int_at_least, require_non_negative
from ._records import HaltReason

__all__ = ["Budget", "Deadline", "Watch", "race"]

T = TypeVar("T")
Sleep = Callable[[float], Awaitable[None]]


class Budget:
    """A live spending account in tokens and/or dollars, safe to share between runs.

    The loop charges every model call to it and stops with ``budget`` once it is spent;
    a call in flight when another consumer (a second run, a parallel verification) spends
    the rest is cancelled at that moment. ``charge`` may be called from any thread.
    """

    def __init__(self, tokens: int | None = None, cost: float | None = None) -> None:
        if tokens is None and cost is None:
            raise ConfigurationError("budget", None, "give tokens=, cost= or both")
        self.tokens = None if tokens is None else require_int_at_least("tokens", tokens, 1)
        self.cost = None if cost is None else require_non_negative("cost", cost)
        self.tokens_used = 0
        self.cost_used = 0.0
        self._lock = threading.Lock()
        self._waiters: set[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = set()

    @classmethod
    def of(cls, value: Budget | int | float | dict[str, Any] | None) -> Budget | None:
        """``Budget`` as is; an int is a token limit; a dict gives ``tokens``/``cost``."""
        if value is None or isinstance(value, Budget):
            return value
        if isinstance(value, dict):
            return cls(**value)
        if isinstance(value, int) and not isinstance(value, bool):
            return cls(tokens=value)
        raise ConfigurationError("budget", value, "must be a Budget, a token count or a dict")

    @property
    def exhausted(self) -> bool:
        """True once the tokens or the cost spent reach their limit."""
        with self._lock:
            return self._exhausted()

    def _exhausted(self) -> bool:
        return (self.tokens is not None and self.tokens_used >= self.tokens) or (
            self.cost is not None and self.cost_used >= self.cost and math.isfinite(self.cost)
        )

    @property
    def tokens_left(self) -> int | None:
        """Tokens still allowed (None without a token limit)."""
        with self._lock:
            return None if self.tokens is None else max(0, self.tokens - self.tokens_used)

    @property
    def cost_left(self) -> float | None:
        """Cost still allowed (None without a cost limit)."""
        with self._lock:
            return None if self.cost is None else max(0.0, self.cost - self.cost_used)

    def charge(self, tokens: int = 0, cost: float = 0.0) -> None:
        """Spend ``tokens`` and ``cost``; wakes every run waiting on exhaustion."""
        with self._lock:
            self.tokens_used += max(0, int(tokens))
            self.cost_used += max(0.0, float(cost))
            if not self._exhausted():
                return
            waiters = list(self._waiters)
            self._waiters.clear()
        for loop, future in waiters:
            with contextlib.suppress(RuntimeError):  # that loop is closed already
                loop.call_soon_threadsafe(_resolve, future)

    async def wait_exhausted(self) -> None:
        """Return once the budget is spent."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        with self._lock:
            if self._exhausted():
                return
            self._waiters.add((loop, future))
        try:
            await future
        finally:
            with self._lock:
                self._waiters.discard((loop, future))

    def __repr__(self) -> str:
        return (
            f"Budget(tokens={self.tokens}, cost={self.cost}, tokens_used={self.tokens_used}, "
            f"cost_used={self.cost_used:.6f})"
        )


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def cancel_waiter(cancel: Any) -> Callable[[], Coroutine[Any, Any, Any]] | None:
    """An awaitable factory for ``cancel`` (an ``asyncio.Event`` or anything with async
    ``wait()``); None for objects that can only be polled with ``is_set()``."""
    if cancel is None:
        return None
    wait = getattr(cancel, "wait", None)
    if wait is not None and inspect.iscoroutinefunction(wait):
        return wait  # type: ignore[no-any-return]
    if not callable(getattr(cancel, "is_set", None)):
        raise ConfigurationError("cancel", cancel, "must be an asyncio.Event or have is_set()")
    return None


class Watch(Protocol):
    """A run's clock and watchers, which every call is raced against (``_run.Run``)."""

    deadline_s: float

    def elapsed(self) -> float: ...

    def watchers(self) -> dict[HaltReason, Callable[[], Any]]: ...


class Deadline:
    """The deadline watcher: ``sleep(seconds)`` when called.

    On the event loop's own clock (``sleep`` is ``asyncio.sleep``) :func:`race` sets a
    timer instead of starting a task to sleep, so a call raced against nothing but the
    deadline costs no task of its own and no watcher task (most calls of most runs).
    """

    __slots__ = ("seconds", "sleep")

    def __init__(self, seconds: float, sleep: Callable[[float], Awaitable[None]]) -> None:
        self.seconds = max(0.0, seconds)
        self.sleep = sleep

    def __call__(self) -> Coroutine[Any, Any, Any]:
        return _sleep(self.sleep, self.seconds)


async def _sleep(sleep: Callable[[float], Awaitable[None]], seconds: float) -> None:
    await sleep(seconds)


async def race(
    call: Awaitable[T],
    watchers: dict[HaltReason, Callable[[], Coroutine[Any, Any, Any]]],
) -> tuple[T | None, HaltReason | None]:
    """Run ``call`` until it finishes or a watcher fires; ``(result, None)`` or
    ``(None, reason)``. The call's own exception propagates; a fired watcher cancels it."""
    if not watchers:
        return await call, None
    if len(watchers) == 1:
        deadline = watchers.get(HaltReason.DEADLINE)
        if type(deadline) is Deadline and deadline.sleep is asyncio.sleep:
            return await _within(call, deadline.seconds)
    main: asyncio.Future[T] = asyncio.ensure_future(call)
    pending: dict[asyncio.Task[Any], HaltReason] = {
        asyncio.ensure_future(factory()): reason for reason, factory in watchers.items()
    }
    try:
        done, _ = await asyncio.wait({main, *pending}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        main.cancel()
        raise
    finally:
        for task in pending:
            task.cancel()
        for task in pending:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
    if main in done:
        return main.result(), None
    fired = [reason for task, reason in pending.items() if task in done]
    main.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await main
    return None, fired[0]


async def _within(call: Awaitable[T], seconds: float) -> tuple[T | None, HaltReason | None]:
    """``call`` in this task, cancelled by the loop's timer at the deadline."""
    timer = asyncio.timeout(seconds)
    try:
        async with timer:
            return await call, None
    except TimeoutError:
        if not timer.expired():
            raise  # the call's own
    return None, HaltReason.DEADLINE
