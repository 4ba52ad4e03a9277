"""Resuming a frozen task: read the human decision, apply it to the state, rebuild the task.

The task state in the store is the record of where the task froze; the queue item holds
the decision. Approve: the frozen action runs as it was (with a ``Confirmation`` if it
needed one). Edit: the edits change the frozen action or the state first. Reject: the
task ends. The decision is written into the state by the fold (``_fold.py``).
"""

from __future__ import annotations

from .._exceptions import ConfigurationError, SessionNotFoundError
from ..feedback import HandoverItem, HandoverQueue, StateStore
from ._fold import fold_decision
from ._state import RequiredField, StateHandle, Task, TaskState

__all__ = [
    "apply_decision",
    "frozen_task",
    "spec_from_state",
]


async def frozen_task(
    store: StateStore, handover_id: str
) -> tuple[HandoverItem, StateHandle, TaskState]:
    """The decided queue item, and the frozen state it belongs to."""
    item = await HandoverQueue(store).get(handover_id)
    if not item.status.decided:
        raise ConfigurationError(
            "handover_id", handover_id, "is still pending; approve, edit or reject it first"
        )
    handle = StateHandle(store, item.session_id or item.task_id)
    try:
        state = await handle.load()
    except SessionNotFoundError:
        if item.frozen_state is None:
            raise
        # The session expired or was removed: the queue kept a copy of the frozen state.
        state = TaskState.model_validate(item.frozen_state)
        await handle.create(state)
    if state.status != "frozen" or state.handover_id != handover_id:
        raise ConfigurationError(
            "handover_id", handover_id, "does not match a frozen task (already resumed?)"
        )
    return item, handle, state


def spec_from_state(state: TaskState) -> Task:
    """The task as the state recorded it (required fields keep their schemas and sources;
    code checks cannot be stored, so pass the task again to keep those)."""
    return Task(
        prompt=state.prompt,
        required_fields=tuple(
            RequiredField(
                name=f["name"],
                description=f.get("description", ""),
                schema=f.get("schema"),
                source=f.get("source"),
            )
            for f in state.required_spec
        ),
    )


apply_decision = fold_decision
"""Apply the decision to the state (``_fold.fold_decision``); the confirmation the frozen
tool call runs with."""
