"""Handing a task over to a human (the ``MANUAL_HANDOVER`` protocol, or an action that
needs a confirmation): the task freezes with the action it was about to take, and an
audit a person can act on goes into the handover queue."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..feedback import HandoverQueue
from ._actions import Proposal
from ._state import PendingAction
from ._trace import build_audit

if TYPE_CHECKING:
    from ._run import Run

__all__ = ["freeze"]


async def freeze(run: Run, proposal: Proposal, key: str, reason: str) -> str:
    """Freeze the task with its pending action, queue the audit; returns the step's note."""
    state = run.state
    p = proposal
    pending: PendingAction | None = None
    if p.kind == "tool" and p.call is not None:
        errors = run.validator.call_errors(p.call, phase=state.phase, latest=state.latest())
        if not errors:
            pending = PendingAction(
                kind="tool", tool=p.call.tool, arguments=p.call.arguments, step_type=p.call.tool
            )
    elif p.kind == "final":
        pending = PendingAction(
            kind="final", answer=p.answer, fields=dict(p.fields), step_type="final"
        )
    state.status = "frozen"
    state.pending = pending
    fix = await run.memory.nearest(
        pending.step_type if pending else key, pending.arguments if pending else {}
    )
    failed = [*state.failures[-10:]]
    failed += [f"required field {n}: {'; '.join(ps)}" for n, ps in state.field_errors.items()]
    audit = build_audit(run.records, failed, fix["suggestion"] if fix else None)
    audit.update(
        task=state.prompt,
        task_id=state.task_id,
        reason=reason,
        pending_action=None if pending is None else pending.model_dump(mode="json"),
        suggested_fix_detail=fix,
        control={
            "f_est": run.control.f_est,
            "protocol": run.control.protocol.value,
            "errors": dict(run.last_errors),
        },
    )
    queue = HandoverQueue(run.store)
    state.handover_id = await queue.submit(
        state.task_id,
        state.run_id,
        audit,
        frozen_state=state.model_dump(mode="json"),
        session_id=run.handle.session_id,
    )
    return f"handed over to a human ({reason}); handover id {state.handover_id}"
