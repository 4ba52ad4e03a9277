"""Handing a task over to a human (the ``MANUAL_HANDOVER`` protocol, an early handover,
an action that needs a confirmation, an event bus that escalates): the task freezes with
the action it was about to take, and an audit a person can act on goes into the handover
queue with a copy of the state as the step leaves it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..feedback import HandoverQueue
from ._actions import Proposal
from ._fold import Edit, Frozen, folded_copy
from ._state import PendingAction
from ._trace import build_audit

if TYPE_CHECKING:
    from ._run import Run
    from ._view import View

__all__ = ["freeze"]


def _pending(run: Run, view: View, p: Proposal) -> PendingAction | None:
    if p.kind == "tool" and p.call is not None:
        state = run.state
        errors = run.validator.call_errors(p.call, phase=view.phase, latest=state.latest())
        if not errors:
            return PendingAction(
                kind="tool", tool=p.call.tool, arguments=p.call.arguments, step_type=p.call.tool
            )
    elif p.kind == "final":
        return PendingAction(
            kind="final", answer=p.answer, fields=dict(p.fields), step_type="final"
        )
    return None


async def freeze(
    run: Run, view: View, proposal: Proposal, reason: str, edits: Sequence[Edit]
) -> tuple[str, Frozen]:
    """Freeze the task with its pending action and queue the audit, with the state as the
    step's ``edits`` so far leave it; returns the step's note and the edit that freezes."""
    pending = _pending(run, view, proposal)
    draft = folded_copy(run.state, [*edits, Frozen(pending, None)])
    fix = await run.memory.nearest(
        pending.step_type if pending else view.key, pending.arguments if pending else {}
    )
    failed = [*draft.failures[-10:]]
    failed += [f"required field {n}: {'; '.join(ps)}" for n, ps in draft.field_errors.items()]
    audit = build_audit(run.records, failed, fix["suggestion"] if fix else None)
    audit.update(
        task=draft.prompt,
        task_id=draft.task_id,
        reason=reason,
        pending_action=None if pending is None else pending.model_dump(mode="json"),
        suggested_fix_detail=fix,
        control={
            "f_est": run.control.f_est,
            "protocol": run.control.protocol.value,
            "errors": view.carry.actuators.latest_errors(),
        },
    )
    handover_id = await HandoverQueue(run.store).submit(
        draft.task_id,
        draft.run_id,
        audit,
        frozen_state=draft.model_dump(mode="json"),
        session_id=run.handle.session_id,
    )
    note = f"handed over to a human ({reason}); handover id {handover_id}"
    return note, Frozen(pending, handover_id)
