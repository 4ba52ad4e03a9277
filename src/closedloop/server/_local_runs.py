"""The runs executing in this process: their asyncio tasks and the events that stop them.

``RunManager`` is built on :class:`LocalRuns`: it starts runs and records them, and this
table is what cancelling, stopping a session, waiting and shutting down act on. Keys are
``<scope>/<session id>/<run id>``.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from ..feedback import StateStore
from ._run_records import store_scope

__all__ = ["LocalRuns"]


@dataclass
class _Local:
    """A run executing in this process: its task, and the event that asks it to stop.

    ``started`` is set by the run's coroutine as it begins: a task cancelled before that
    never runs a line of it, so nothing would record the run as cancelled.
    """

    cancel: asyncio.Event
    agent_watches_cancel: bool = True
    task: asyncio.Task[None] = field(init=False)
    started: bool = False

    def stop(self) -> None:
        """Ask the run to stop: the event for an ``Agent``; a runner's task is cancelled
        too once it has begun (before, the run sees the event as it begins)."""
        self.cancel.set()
        if not self.agent_watches_cancel and self.started:
            self.task.cancel()


class LocalRuns:
    """The table of runs executing here, and what stops them."""

    def __init__(self) -> None:
        self._local: dict[str, _Local] = {}

    @property
    def local_runs(self) -> int:
        """Runs executing in this process now."""
        return len(self._local)

    def is_local(self, store: StateStore, key: str) -> bool:
        """Whether the run executes in this process now."""
        return f"{store_scope(store)}/{key}" in self._local

    def cancel(self, store: StateStore, key: str) -> bool:
        """Ask a run executing here to stop (it ends ``cancelled``); False if not here.

        An ``Agent`` watches the event and ends its run itself; a runner, which takes no
        cancel event, has its task cancelled (its loop records that as ``cancelled``).
        """
        local = self._local.get(f"{store_scope(store)}/{key}")
        if local is None:
            return False
        local.stop()
        return True

    async def stop_session(self, store: StateStore, session_id: str, timeout_s: float) -> None:
        """Cancel every run of a session executing here and wait (bounded) for them."""
        prefix = f"{store_scope(store)}/{session_id}/"
        jobs = [(k, v) for k, v in self._local.items() if k.startswith(prefix)]
        for _, local in jobs:
            local.stop()
        if jobs:
            await asyncio.wait([local.task for _, local in jobs], timeout=timeout_s)
        for _, local in jobs:
            if not local.task.done():
                local.task.cancel()

    async def wait_idle(self) -> None:
        """Wait until no run executes here (runs started meanwhile are waited for too)."""
        while self._local:
            await asyncio.wait([local.task for local in list(self._local.values())])

    async def shutdown(self, timeout_s: float = 5.0) -> None:
        """Cancel every run executing here and wait for them to record it."""
        jobs = [local.task for local in self._local.values()]
        for local in self._local.values():
            local.cancel.set()
        if jobs:
            _, pending = await asyncio.wait(jobs, timeout=timeout_s)
            for job in pending:
                job.cancel()
            if pending:
                await asyncio.wait(pending, timeout=timeout_s)
