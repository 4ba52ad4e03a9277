"""Stepping through a run: ``AgentRun``, one run stepped with ``async for``.

The steps come from the driver (``_driver.py``); a run's start hands it the run and what
its first step starts from (a resumed task's confirmation, a recovered task's note).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

from ._driver import drive
from ._records import RunResult, StepRecord
from ._run import Run
from ._view import Carry

__all__ = ["AgentRun", "Start"]

Start = Callable[[], Awaitable[tuple[Run, Carry]]]
"""What starts a run: its ``Run``, and what its first step starts from."""


class AgentRun:
    """One run, stepped with ``async for record in run``; ``result`` is set at the end.

    Use it as an async context manager (or call ``aclose``) when you may stop iterating
    early: the run is then ended as ``cancelled`` and its trace closed.
    """

    def __init__(self, start: Start) -> None:
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
            self._run, carry = await self._start()
            self._gen = drive(self._run, carry)
        return await self._gen.__anext__()

    async def aclose(self) -> None:
        """End the run early: it halts as ``cancelled`` and its trace is closed."""
        if self._gen is not None:
            await self._gen.aclose()  # type: ignore[attr-defined]

    async def __aenter__(self) -> AgentRun:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
