"""Running an agent from code without an event loop, and the typed view of a run.

The ``_sync`` twins of ``Agent`` run their coroutine on a fresh event loop; called from
inside a running loop they refuse (a nested loop would block the outer one), saying to
await the async twin instead.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, TypeVar

from .._exceptions import AgentError, ConfigurationError
from ._iterate import AgentRun, Start
from ._records import RunResult

__all__ = ["TypedRun", "finished", "no_running_loop", "run_sync", "sync_twin"]

R = TypeVar("R")
S = TypeVar("S")
P = ParamSpec("P")


class TypedRun(AgentRun):
    """An :class:`AgentRun` whose ``result`` is the agent's typed result."""

    def __init__(self, start: Start, typed: Callable[[RunResult], RunResult]) -> None:
        super().__init__(start)
        self._typed = typed

    @property
    def result(self) -> RunResult | None:
        plain = super().result
        return None if plain is None else self._typed(plain)


def finished(result: RunResult | None) -> RunResult:
    if result is None:  # pragma: no cover - drive() always finishes the run
        raise AgentError("the run ended without a result")
    return result


def no_running_loop(name: str) -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise ConfigurationError(
        name, "inside a running event loop", "await the async twin (run, iter, ...) instead"
    )


def run_sync(coro: Coroutine[Any, Any, R]) -> R:
    try:
        no_running_loop("run_sync")
    except ConfigurationError:
        coro.close()
        raise
    return asyncio.run(coro)


def sync_twin(
    method: Callable[Concatenate[S, P], Coroutine[Any, Any, R]],
) -> Callable[Concatenate[S, P], R]:
    """The ``_sync`` twin of an async method: same parameters, run on a fresh event loop.

    The twin looks the async method up on the instance, so a subclass that overrides it
    changes both twins, and the two can never drift apart in their parameters.
    """
    name = method.__name__

    @functools.wraps(method)
    def twin(self: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
        coro: Coroutine[Any, Any, R] = getattr(self, name)(*args, **kwargs)
        return run_sync(coro)

    twin.__name__ = f"{name}_sync"
    twin.__qualname__ = f"{method.__qualname__}_sync"
    twin.__doc__ = f":meth:`{name}` for code without an event loop."
    return twin
