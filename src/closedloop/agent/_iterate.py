"""Stepping through a run: ``AgentRun`` and the generator that drives a ``Run`` to its end.

Every way out is a recorded end: the last step's halt, a stop before the first step,
the caller walking away (``cancelled``) or an exception (``error``, with the exception in
the result; only a ``BaseException`` such as ``KeyboardInterrupt`` is re-raised). What the
tools share for the run (their ``scope``: a connection to an MCP server) is entered before
the first step and left on every one of these ways out.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable

from ._halt_error import end_with_error
from ._modes import step
from ._records import HaltReason, RunResult, StepRecord
from ._run import Run
from ._tools import Tool

__all__ = ["AgentRun", "drive"]


class AgentRun:
    """One run, stepped with ``async for record in run``; ``result`` is set at the end.

    Use it as an async context manager (or call ``aclose``) when you may stop iterating
    early: the run is then ended as ``cancelled`` and its trace closed.
    """

    def __init__(self, start: Callable[[], Awaitable[Run]]) -> None:
        self._start = start
        self._run: Run | None = None
        self._gen: AsyncIterator[StepRecord] | None = None

    @property
    def result(self) -> RunResult | None:
        """The run's result once it has ended."""
        return None if self._run is None else self._run.result

    def __aiter__(self) -> AgentRun:
        return self

    async def __anext__(self) -> StepRecord:
        if self._gen is None:
            self._run = await self._start()
            self._gen = drive(self._run)
        return await self._gen.__anext__()

    async def aclose(self) -> None:
        """End the run early: it halts as ``cancelled`` and its trace is closed."""
        if self._gen is not None:
            await self._gen.aclose()  # type: ignore[attr-defined]

    async def __aenter__(self) -> AgentRun:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


async def _enter_scopes(stack: contextlib.AsyncExitStack, tools: Iterable[Tool]) -> None:
    seen: set[int] = set()
    for tool in tools:
        if tool.scope is not None and id(tool.scope) not in seen:
            seen.add(id(tool.scope))
            await stack.enter_async_context(tool.scope.run_scope())


async def drive(run: Run) -> AsyncIterator[StepRecord]:
    scopes = contextlib.AsyncExitStack()
    try:
        try:
            await _enter_scopes(scopes, run.settings.tools.values())
            halt = run.stop_reason()
            if halt is not None:
                await run.finish(halt)
                return
            while run.result is None:
                yield await step(run)
        except (GeneratorExit, asyncio.CancelledError):
            if run.result is None:
                with contextlib.suppress(Exception):
                    await run.finish(
                        HaltReason.CANCELLED, message="the run was stopped from outside"
                    )
            raise
        except Exception as exc:  # every exception inside a run ends it as error, in the result
            await end_with_error(run, exc)
        except BaseException as exc:
            if run.result is None:
                with contextlib.suppress(Exception):
                    await run.finish(HaltReason.ERROR, message=f"{type(exc).__name__}: {exc}")
            raise
    finally:
        await scopes.aclose()  # the tools' shared resources, on every way out
