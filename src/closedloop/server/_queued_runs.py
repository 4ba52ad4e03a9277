"""Runs dispatched through the run queue: the :class:`RunManager` of a worker that reads it.

A new run, and a run that goes on after a person's decision, is recorded and appended to
the queue instead of executing where the request landed; whichever worker reads the entry
executes it (:meth:`QueuedRunManager.take`), and acknowledges the entry when the run ends
here. When another worker took an entry over while this one was silent, this one stops
that run and writes nothing more to its record: the run is the other's now.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from ..feedback import StateStore
from ._dispatch import QueuedRun, RunQueue
from ._run_exec import _HubSink
from ._run_records import run_key, store_scope
from ._runs import SETTLED, RunManager, _log

__all__ = ["QueuedRunManager"]


class QueuedRunManager(RunManager):
    """A :class:`RunManager` whose runs go through ``queue`` (see the module docstring)."""

    def __init__(self, queue: RunQueue, **options: Any) -> None:
        super().__init__(**options)
        self.queue: RunQueue = queue
        self._entries: dict[str, str] = {}  # local run key -> the queue entry it executes
        self._lost: set[str] = set()  # entries another worker took over: fenced out

    def _dispatches(self) -> bool:
        return True

    async def _enqueue(
        self, store: StateStore, key: str, record: dict[str, Any], hub_sink: _HubSink
    ) -> bool:
        await self.queue.submit(store_scope(store), key)
        return True

    async def _requeue(self, store: StateStore, key: str, changes: Mapping[str, Any]) -> bool:
        await self.update(store, key, changes)
        await self.queue.submit(store_scope(store), key)
        return True

    async def take(self, store: StateStore, run: Mapping[str, Any], entry: QueuedRun) -> str:
        """Execute the run a queue entry names, from where its task state stands.

        No task state yet: the run starts. A running state: the run's worker died (or the
        run was released after a pending effect was settled), so it recovers. A frozen
        state whose handover was decided: it resumes. Anything else needs nobody: the
        entry is acknowledged. Returns what was done.
        """
        key = run_key(str(run["session_id"]), str(run["id"]))
        local_key = f"{store_scope(store)}/{key}"
        if local_key in self._local:
            return "here"
        if run.get("status") != "running":
            await self.queue.ack(entry.entry_id)
            return "ended"
        how = await self.continue_run(store, run, taken_over=entry.taken_over)
        if how in SETTLED:
            await self.queue.ack(entry.entry_id)
        else:
            self._entries[local_key] = entry.entry_id
        return how

    def held_entries(self) -> list[str]:
        """The queue entries of the runs executing here."""
        return [entry for entry in self._entries.values() if entry not in self._lost]

    def lose(self, entry_ids: list[str]) -> None:
        """Another worker took these entries over: stop their runs here, writing nothing."""
        for local_key, entry in list(self._entries.items()):
            if entry in entry_ids:
                self._lost.add(entry)
                _log.warning("run %s was taken over by another worker: stopping it", local_key)
                local = self._local.get(local_key)
                if local is not None:
                    local.cancel.set()
                    if not local.agent_watches_cancel:
                        local.task.cancel()

    def _fenced(self, local_key: str) -> bool:
        """Whether the run's queue entry went to another worker (its writes are not ours)."""
        return self._entries.get(local_key) in self._lost

    async def _finished(self, local_key: str) -> None:
        entry = self._entries.pop(local_key, None)
        if entry is None:
            return
        if entry in self._lost:
            self._lost.discard(entry)  # the worker that took it over acknowledges it
            return
        try:
            await asyncio.shield(self.queue.ack(entry))
        except Exception as exc:  # Redis away: the entry is taken over and found ended
            _log.warning("run queue: could not acknowledge %s: %s", entry, exc)
