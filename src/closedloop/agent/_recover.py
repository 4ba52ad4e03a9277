"""Recovering a task whose process died mid-run, from the state it persisted.

The loop saves the task state by compare-and-set at the end of every step, and every
``once``/``irreversible`` effect is claimed in the ledger before it runs and committed
after. So a task killed at any point of a step is, in the store, at the start of that
step: recovery reconciles the ledger's pending claims first (each action's reconciler
asks the world whether the effect happened), then redoes the step. The same proposal
gets the same idempotency key, so an effect that was committed is replayed from the
ledger instead of run again. Recovery first saves the state once (``recoveries + 1``):
a process that was only slow, not dead, then loses its next compare-and-set and stops.
"""

from __future__ import annotations

from collections.abc import Callable

from .._exceptions import ConfigurationError
from ..execution import EffectLedger
from ..feedback import StateStore
from ._fold import fold_recovery
from ._resume import spec_from_state
from ._run import Run
from ._settings import LoopSettings
from ._state import StateHandle, Task, TaskState
from ._view import Carry

__all__ = ["recover_run"]

NewRun = Callable[[Task, TaskState, StateHandle], Run]


async def recover_run(
    settings: LoopSettings,
    store: StateStore,
    session_id: str,
    *,
    task: Task | None,
    new_run: NewRun,
) -> tuple[Run, Carry]:
    """The ``Run`` of an interrupted task, ready to drive from its last saved step, and
    what its first step starts from (the note that the task resumed here).

    ``new_run`` builds the run from the task, its state and its handle, as the agent
    builds every run.

    Raises ``SessionNotFoundError`` for an unknown task, ``ConfigurationError`` for a task
    that is frozen for a human (resume it by handover id) or already ended, and
    ``ReconciliationRequiredError`` when a pending effect has no reconciler that can say
    whether it reached the world (the state is left untouched then).
    """
    handle = StateHandle(store, session_id)
    state = await handle.load()
    if state.status == "frozen":
        raise ConfigurationError(
            "task_id", session_id, f"is frozen for a human; resume handover {state.handover_id}"
        )
    if state.status != "running":
        raise ConfigurationError("task_id", session_id, f"has already ended ({state.halt})")
    # The namespace and the owner the loop's executor writes: the run resolves its own claims.
    ledger = EffectLedger(store, owner=session_id, clock=settings.wall_clock)
    resolved = await ledger.reconcile_pending(
        state.task_id, [tool.action for tool in settings.tools.values()]
    )
    fold_recovery(state)
    await handle.save(state)  # fences out a writer that was only slow, not dead
    spec = task if task is not None else spec_from_state(state)
    run = new_run(spec, state, handle)
    settled = ", ".join(f"{r.action} {r.status.value}" for r in resolved) or "none pending"
    note = (
        f"resumed after an interruption (recovery {state.recoveries}) from the state saved "
        f"at step {state.step}; ledger reconciled: {settled}"
    )
    run.refresh_fields()
    return run, Carry(note=note)
