"""Resuming a frozen task: read the human decision, apply it to the state, rebuild the task.

The task state in the store is the record of where the task froze; the queue item holds
the decision. Approve: the frozen action runs as it was (with a ``Confirmation`` if it
needed one). Edit: the edits change the frozen action or the state first. Reject: the
task ends.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._exceptions import ConfigurationError, SessionNotFoundError
from ..execution import Confirmation
from ..feedback import HandoverItem, HandoverQueue, HandoverStatus, StateStore
from ._state import RequiredField, StateHandle, Task, TaskState

__all__ = ["apply_decision", "apply_edits", "frozen_task", "spec_from_state"]


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


def apply_decision(item: HandoverItem, state: TaskState) -> Confirmation | None:
    """Apply the decision to the state; the confirmation the frozen tool call runs with."""
    who = item.decided_by or "a reviewer"
    if item.status is HandoverStatus.REJECTED:
        state.status = "done"
        return None
    state.status = "running"
    if item.status is HandoverStatus.EDITED:
        apply_edits(state, item.edits or {})
    note = f": {item.note}" if item.note else ""
    state.notes.append(f"{who} {item.status.value} the frozen step{note}")
    if state.pending is not None and state.pending.kind == "tool":
        return Confirmation(approved_by=who, action=state.pending.tool, note=item.note)
    return None


def apply_edits(state: TaskState, edits: Mapping[str, Any]) -> None:
    """Edits: ``arguments`` patch the frozen tool call, ``fields`` set required fields,
    ``note`` is shown to the model; other keys replace task-state fields."""
    pending = state.pending
    replaced: dict[str, Any] = {}
    for key, value in edits.items():
        if key == "arguments" and isinstance(value, Mapping):
            if pending is None or pending.kind != "tool":
                raise ConfigurationError("edits", key, "there is no frozen tool call to edit")
            pending.arguments = {**pending.arguments, **value}
        elif key in ("tool", "answer") and pending is not None:
            setattr(pending, key, value)
        elif key in ("fields", "required_fields") and isinstance(value, Mapping):
            state.required_fields.update(value)
            if pending is not None and pending.kind == "final":
                pending.fields = {**pending.fields, **value}
        elif key in ("note", "notes"):
            notes = [value] if isinstance(value, str) else list(value)
            state.notes.extend(f"reviewer: {n}" for n in notes)
        elif key in TaskState.model_fields:
            replaced[key] = value
        else:
            raise ConfigurationError(
                "edits", key, "unknown edit; use arguments, fields, note or a task-state field"
            )
    if replaced:
        merged = TaskState.model_validate({**state.model_dump(mode="json"), **replaced})
        for key in replaced:
            setattr(state, key, getattr(merged, key))
