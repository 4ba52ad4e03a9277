"""Recovery at start: runs left ``running`` by a process that is gone are taken over.

A service that executes runs in its own process (no run queue: the embedded SQLite
default) and is killed leaves each run it was executing recorded as ``running`` under a
worker that no longer exists. When a service starts on that store, it takes those runs
over through the same path a queue takeover uses (:meth:`RunManager.continue_run`):
pending effects reconciled and the step redone, a run that had not saved a step started,
a pending effect nothing can settle handed to a person. No person has to ask.

Several workers that start together on one store claim each orphan by compare-and-set
on its record's version, so exactly one continues it. A run is *orphaned* when its record names a worker on this host whose process is gone
(or is this very process, which executes nothing yet). Runs of another host are left to
that host: a process id says nothing elsewhere (several hosts share runs through the run
queue, whose takeover covers them). Durable-execution engines recover the same way when
their embedded mode starts again (pending workflows resumed on launch).
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .._exceptions import StaleStateError
from ..feedback import Record, StateStore
from ._auth import Principal
from ._deps import Service
from ._run_records import RUNS

__all__ = ["Recovered", "is_orphaned", "recover_orphaned_runs"]

_log = logging.getLogger("closedloop.server")


@dataclass(frozen=True)
class Recovered:
    """One run taken over at start: its key scope, record key and what was done."""

    scope: str
    key: str
    how: str


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive
    return True


def is_orphaned(run: Mapping[str, Any], *, host: str, pid: int) -> bool:
    """Whether a ``running`` record's worker is gone: on ``host``, dead or this process
    ``pid`` (which has just started, so executes none of the store's runs yet)."""
    if run.get("status") != "running":
        return False
    worker = run.get("worker")
    if not isinstance(worker, int) or isinstance(worker, bool):
        return False  # not yet taken by any worker (a queued run): the queue owns it
    if run.get("host", host) != host:
        return False
    return worker == pid or not _alive(worker)


async def _claim(store: StateStore, record: Record, host: str, pid: int) -> dict[str, Any] | None:
    """Take the run for this process by compare-and-set on the version it was read at, so
    of several workers starting together exactly one continues it (None: lost the race).
    The record keeps naming the dead worker in ``taken_from`` (set by the takeover)."""
    run = record.to_dict()
    claimed = {**run, "claimed_by": {"host": host, "pid": pid}}
    try:
        await store.record_put(RUNS, record.key, claimed, expected_version=record.version)
    except StaleStateError:
        return None
    return run


async def recover_orphaned_runs(service: Service) -> list[Recovered]:
    """Take over, in this process, every orphaned run of every key's scope.

    With a run queue nothing is done here: the queue's takeover finds a silent worker's
    runs. Each run is taken independently; one that cannot be rebuilt ends ``error``
    with the reason in its record, and the others still recover.
    """
    if service.runs.queue is not None:
        return []
    host, pid = socket.gethostname(), os.getpid()
    recovered: list[Recovered] = []
    for api_key in await service.keys.list():
        store = service.scoped(Principal(key_id=api_key.key_id, name=api_key.name))
        for record in await store.record_list(RUNS):
            run = record.to_dict()
            if not is_orphaned(run, host=host, pid=pid):
                continue
            if service.runs.executes_here(store, record.key):
                continue
            claimed = await _claim(store, record, host, pid)
            if claimed is None:
                continue  # another process starting at the same time took it
            how = await service.runs.continue_run(store, claimed, taken_over=True)
            _log.warning(
                "run %s was left running by worker %s, which is gone: %s",
                record.key,
                run.get("worker"),
                how,
            )
            recovered.append(Recovered(store.scope, record.key, how))
    return recovered
