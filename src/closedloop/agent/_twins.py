"""Running an agent from code without an event loop, and the typed view of a run.

The ``_sync`` twins of ``Agent`` run their coroutine on a fresh event loop; called from
inside a running loop they refuse (a nested loop would block the outer one), saying to
await the async twin instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from .._exceptions import AgentError, ConfigurationError
from ._iterate import AgentRun
from ._records import RunResult
from ._run import Run

__all__ = ["TypedRun", "finished", "no_running_loop", "run_sync"]

R = TypeVar("R")


class TypedRun(AgentRun):
    """An :class:`AgentRun` whose ``result`` is the agent's typed result."""

    def __init__(
        self, start: Callable[[], Awaitable[Run]], typed: Callable[[RunResult], RunResult]
    ) -> None:
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
