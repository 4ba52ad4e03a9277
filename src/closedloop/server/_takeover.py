"""Taking runs over: the queue's consumer loop, and the pending effect handed to a person.

:class:`Dispatcher` is the part of a worker that reads the run queue (``_dispatch``):
new entries start runs, entries reclaimed from a silent worker continue them through
recovery (``Agent.recover``: pending effects reconciled, the step redone, a committed
effect replayed from the ledger). When recovery finds an effect claimed in the ledger
that nothing can settle (no reconciler, or one that cannot reach the world), the run
becomes a handover item instead of an error: the audit says what was claimed (tool,
arguments, idempotency key, when and by which worker) and what the world may have done,
and the person chooses one of :data:`CHOICES`; :func:`apply_choice` writes that choice to
the ledger, after which the run continues from the decision.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from .._exceptions import SessionNotFoundError
from .._redaction import redact
from ..agent._state import StateHandle
from ..execution import EffectLedger, EffectStatus
from ..feedback import HandoverItem, HandoverQueue, StateStore
from ._dispatch import QueuedRun, RunQueue
from ._run_records import RUNS, handover_pending, update_run

__all__ = [
    "CHOICES",
    "PENDING_EFFECT",
    "Dispatcher",
    "Move",
    "apply_choice",
    "end_task",
    "hand_over_pending_effect",
    "is_pending_effect",
    "next_move",
    "pending_effect_audit",
]

_log = logging.getLogger("closedloop.server")

PENDING_EFFECT = "pending_effect"
"""The ``kind`` in the audit of a handover raised for an effect nobody can settle."""

CHOICES: Mapping[str, str] = {
    "mark_applied": "the effect reached the world: record it as applied (with the result "
    "you give, if any) and continue; the step is redone and the effect is not run again",
    "retry": "the effect did not reach the world: record it as not applied and continue; "
    "the step is redone and the effect runs again",
    "abandon": "end the run here; the effect stays recorded as possibly applied",
}
"""What a person may decide on a pending effect, and what each choice does."""


def is_pending_effect(item: HandoverItem) -> bool:
    """Whether a handover item is a pending effect waiting for a choice."""
    return item.audit.get("kind") == PENDING_EFFECT


async def pending_effect_audit(
    store: StateStore, task_id: str, run: Mapping[str, Any], reason: str
) -> dict[str, Any]:
    """The audit of a handover for the task's pending effects (what a person decides on)."""
    ledger = EffectLedger(store)
    effects = []
    for record in await ledger.pending(task_id):
        stored = await store.record_get(ledger.namespace, record.key)
        value = {} if stored is None else stored.to_dict()
        effects.append(
            {
                "tool": record.action,
                "arguments": record.args,
                "idempotency_key": record.key,
                "effect": record.effect.value,
                "step": record.step,
                "attempts": record.attempts,
                "claimed_at": None if stored is None else stored.updated_at,
                # The ledger names its claimant where it records one; else the run's worker.
                "claimed_by": value.get("owner") or run.get("taken_from") or run.get("worker"),
                "world": f"{record.action} may have been applied or not: the worker that "
                "claimed it stopped before recording the outcome, and nothing can ask the "
                "world",
            }
        )
    return {
        "kind": PENDING_EFFECT,
        "task": run.get("task"),
        "reason": reason,
        "pending_effects": effects,
        "choices": dict(CHOICES),
    }


async def apply_choice(
    store: StateStore, item: HandoverItem, choice: str, result: Any, decided_by: str
) -> list[str]:
    """Write a person's choice on each pending effect of ``item`` to the ledger.

    Returns the keys it settled (an effect no longer pending, settled meanwhile by some
    other path, is left as it is).
    """
    ledger = EffectLedger(store)
    settled: list[str] = []
    for effect in item.audit.get("pending_effects") or []:
        record = await ledger.get(str(effect.get("idempotency_key")))
        if record is None or record.status is not EffectStatus.PENDING:
            continue
        if choice == "mark_applied":
            await ledger.commit(record, result, note=f"marked applied by {decided_by}")
        elif choice == "retry":
            await ledger.fail(record, f"marked not applied by {decided_by}; retried")
        else:
            continue  # abandon: the world may hold it; the entry says so by staying pending
        settled.append(record.key)
    return settled


async def end_task(store: StateStore, session: str) -> None:
    """End an abandoned task's state, so nothing recovers it later."""
    handle = StateHandle(store, session)
    try:
        state = await handle.load()
    except SessionNotFoundError:
        return
    state.status = "done"
    state.halt = "handover"
    await handle.save(state)


@dataclass(frozen=True, slots=True)
class Move:
    """What a worker does with a run it read from the queue, and the record's changes
    when that is nothing (``waiting``, ``ended``)."""

    how: str  # start | resume | recover | waiting | ended
    handover_id: str | None = None
    changes: Mapping[str, Any] = field(default_factory=dict)


async def next_move(store: StateStore, run: Mapping[str, Any]) -> Move:
    """Where a run's task state stands decides: no state yet, it starts; running (its
    worker died, or a person settled its pending effect), it recovers; frozen with the
    handover decided, it resumes; frozen and pending, it waits; ended, nothing is left."""
    try:
        state = await StateHandle(store, str(run["agent_session"])).load()
    except SessionNotFoundError:
        return Move("start")  # it never saved a step
    if state.status == "frozen":
        handover_id = state.handover_id or run.get("handover_id")
        if await handover_pending(store, handover_id):
            return Move("waiting", handover_id, {"status": "handover"})
        return Move("resume", handover_id)
    if state.status == "running":
        return Move("recover")
    # The task finished and saved its end, but its worker stopped before writing the run's
    # record: the record takes the outcome from the saved task state.
    ended = {
        "status": "done",
        "halt_reason": state.halt,
        "success": state.halt == "final",
        "answer": None if state.answer is None else redact(state.answer),
        "fields": redact(dict(state.required_fields)),
        "message": "ended before its worker stopped; the outcome is the saved task state's",
    }
    return Move("ended", None, ended)


async def hand_over_pending_effect(
    store: StateStore, run: Mapping[str, Any], task_id: str, reason: str
) -> dict[str, Any]:
    """Queue the handover for a task's pending effects; returns the run record's changes."""
    audit = await pending_effect_audit(store, task_id, run, redact(reason))
    handover_id = await HandoverQueue(store).submit(
        task_id, str(run.get("id") or task_id), audit, session_id=run.get("agent_session")
    )
    return {
        "status": "handover",
        "halt_reason": "handover",
        "success": None,
        "handover_id": handover_id,
        "message": "a claimed effect may or may not have reached the world: "
        f"a person decides (handover {handover_id})",
    }


StoreOf = Callable[[str], StateStore]
Take = Callable[[StateStore, Mapping[str, Any], QueuedRun], Awaitable[str]]


@dataclass(eq=False, repr=False, slots=True)
class Dispatcher:
    """One worker's consumer of the run queue: reads, heartbeats, takes over.

    ``store_of(scope)`` is the store a run of that key scope lives in; ``take`` executes
    (or settles) the run an entry names and says what it did; ``held()`` lists the entry
    ids of the runs executing here, touched at every heartbeat so no one takes them;
    ``lose(ids)`` stops the runs of entries another worker took over meanwhile (this one
    was silent too long: the run is the other's now, and this one must not write).
    """

    queue: RunQueue
    store_of: StoreOf
    take: Take
    held: Callable[[], list[str]]
    lose: Callable[[list[str]], None]
    _: KW_ONLY
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    taken_over: int = field(default=0, init=False)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list, init=False)

    def __repr__(self) -> str:
        return f"Dispatcher({self.queue!r}, taken_over={self.taken_over})"

    async def start(self) -> None:
        """Open the queue and start reading it."""
        await self.queue.open()
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._consume(), name="closedloop-queue-read"),
            loop.create_task(self._maintain(), name="closedloop-queue-heartbeat"),
        ]

    async def stop(self) -> None:
        """Stop reading (runs executing here go on until the service stops them)."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks = []

    async def _consume(self) -> None:
        while True:
            try:
                for entry in await self.queue.read():
                    await self.handle(entry)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # Redis away: say so, wait, read again
                _log.warning("run queue: read failed: %s", exc)
                await self.sleep(self.queue.heartbeat_s)

    async def _maintain(self) -> None:
        while True:
            await self.sleep(self.queue.heartbeat_s)
            try:
                await self.beat()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                _log.warning("run queue: heartbeat failed: %s", exc)

    async def beat(self) -> int:
        """One heartbeat: touch the entries held here, take over the idle ones; returns how
        many were taken over."""
        lost = await self.queue.touch(self.held())
        if lost:
            self.lose(lost)
        taken = 0
        for entry in await self.queue.reclaim():
            if entry.entry_id in self.held():
                continue  # ours, touched late: still executing here
            taken += 1
            self.taken_over += 1
            _log.warning("run queue: taking over %s (entry %s)", entry.key, entry.entry_id)
            await self.handle(entry)
        return taken

    async def handle(self, entry: QueuedRun) -> None:
        """Execute (or settle) the run an entry names. A run that cannot be taken ends in
        error and leaves the queue; with the store away too, the entry stays pending, goes
        idle, and is taken again after ``takeover_after_s``."""
        store = self.store_of(entry.scope)
        try:
            record = await store.record_get(RUNS, entry.key)
            if record is None:  # the session was deleted meanwhile
                await self.queue.ack(entry.entry_id)
                return
            await self.take(store, record.to_dict(), entry)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            message = redact(f"could not run from the queue: {type(exc).__name__}: {exc}")
            _log.warning("run queue: %s %s", entry.key, message)
            failed = {"status": "error", "halt_reason": "error", "success": False}
            try:
                await update_run(store, entry.key, {**failed, "message": message}, now=time.time)
            except Exception:
                return  # the store is away too: the entry goes idle and is taken again
            with contextlib.suppress(Exception):
                await self.queue.ack(entry.entry_id)
