"""The fold: the one place the task state is written.

A step's stages read the task state and return values. What a step changes in the state
travels in those values as edits (the small frozen classes below), in the order the
stages made them; :func:`fold_step` applies them once the step is measured and
controlled, then counts the step. The other writes of a task's life are here too: the
state a task starts with (:func:`new_state`), its end (:func:`fold_end`), a human's
decision on a frozen task (:func:`fold_decision`, :func:`apply_edits`) and a recovery
(:func:`fold_recovery`). A stage that needs the state as a step left it so far (the copy a
handover queues) asks for :func:`folded_copy`, never for the state itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._exceptions import ConfigurationError
from ..execution import Confirmation
from ..feedback import HandoverItem, HandoverStatus
from ._records import HaltReason, RunUsageSummary
from ._state import (
    ObservationEntry,
    PendingAction,
    PlanStep,
    RequiredField,
    Task,
    TaskState,
    field_problems,
)

__all__ = [
    "Edit",
    "EffectKey",
    "Filled",
    "Frozen",
    "Noted",
    "Observed",
    "Phase",
    "PlanEdit",
    "Shown",
    "Signed",
    "Spent",
    "TakenPending",
    "apply_edits",
    "field_errors",
    "fold_decision",
    "fold_end",
    "fold_fields",
    "fold_recovery",
    "fold_step",
    "folded_copy",
    "new_state",
]

KEEP_SIGNATURES = 32  # the repeat guard's memory of recent actions
KEEP_SEEN = 64  # digests of the values the task has seen (progress)
KEEP_FAILURES = 20  # failures kept for the next projection and the handover audit


@dataclass(frozen=True, slots=True)
class Phase:
    """The phase the step runs in."""

    phase: str


@dataclass(frozen=True, slots=True)
class Shown:
    """The projection showed the model the first ``notes`` notes: they are used up."""

    notes: int


@dataclass(frozen=True, slots=True)
class Noted:
    """Notes for the model's next projection, and failures for it and the audit."""

    notes: tuple[str, ...] = ()
    failures: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Filled:
    """The required fields after this step, and what is still wrong with the filled ones."""

    fields: Mapping[str, Any]
    errors: Mapping[str, list[str]]


@dataclass(frozen=True, slots=True)
class Observed:
    """An observation as kept (the newest ``keep``), and the digest of a value new to the task."""

    entry: ObservationEntry
    digest: str | None
    keep: int


@dataclass(frozen=True, slots=True)
class Signed:
    """The action's signature for the repeat guard (None: the last one is taken back,
    nothing ran) and how often the action repeated."""

    signature: str | None
    repeats: int


@dataclass(frozen=True, slots=True)
class TakenPending:
    """The action a human decided on was proposed again: it is no longer pending."""


@dataclass(frozen=True, slots=True)
class Frozen:
    """The task frozen for a human, with the action it was about to take and the
    handover queue's id (None in the copy the queue keeps)."""

    pending: PendingAction | None
    handover_id: str | None


@dataclass(frozen=True, slots=True)
class EffectKey:
    """An effect that reached the ledger."""

    key: str


@dataclass(frozen=True, slots=True)
class Spent:
    """Model calls charged to the task's budget, and what the run's live budget (if it has
    one) had left after them."""

    usage: RunUsageSummary
    left: tuple[int | None, float | None] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanEdit:
    """What a plan mode decided about its plan: a new plan (its version + 1), a plan step
    marked (``status``, one more send-back), one more replan, where the cursor and the
    phase go next."""

    steps: tuple[PlanStep, ...] | None = None
    index: int | None = None
    status: str | None = None
    sendback: bool = False
    replanned: bool = False
    cursor: int | None = None
    phase: str | None = None


Edit = (
    Phase
    | Shown
    | Noted
    | Filled
    | Observed
    | Signed
    | TakenPending
    | Frozen
    | EffectKey
    | Spent
    | PlanEdit
)


def _apply(state: TaskState, edit: Edit) -> None:
    match edit:
        case Phase(phase):
            state.phase = phase
        case Shown(count):
            del state.notes[:count]
        case Noted(notes, failures):
            state.notes.extend(notes)
            state.failures.extend(failures)
        case Filled(fields, errors):
            state.required_fields = dict(fields)
            state.field_errors = {name: list(e) for name, e in errors.items()}
        case Observed(entry, digest, keep):
            if digest is not None:
                state.seen_values.append(digest)
                del state.seen_values[:-KEEP_SEEN]
            state.observations.append(entry)
            overflow = len(state.observations) - keep
            if overflow > 0:
                del state.observations[:overflow]
                state.dropped_observations += overflow
        case Signed(signature, repeats):
            if signature is None:
                state.signatures = state.signatures[:-1]
            else:
                state.signatures = [*state.signatures, signature][-KEEP_SIGNATURES:]
            state.repeat_count = repeats
        case TakenPending():
            state.pending = None
        case Frozen(pending, handover_id):
            state.status, state.pending, state.handover_id = "frozen", pending, handover_id
        case EffectKey(key):
            if key not in state.effect_keys:
                state.effect_keys.append(key)
        case Spent(usage, left):
            b = state.budget
            b.tokens_used += usage.prompt_tokens + usage.completion_tokens
            b.cost_used += usage.cost
            b.model_calls += usage.model_calls
            if left is not None:
                b.tokens_left, b.cost_left = left
        case PlanEdit():
            _apply_plan(state, edit)


def _apply_plan(state: TaskState, edit: PlanEdit) -> None:
    if edit.steps is not None:
        state.plan = [s.model_copy() for s in edit.steps]
        state.plan_version += 1
    if edit.index is not None and edit.index < len(state.plan):
        marked = state.plan[edit.index]
        if edit.status is not None:
            marked.status = edit.status  # type: ignore[assignment]  # a PlanStep status
        if edit.sendback:
            marked.sendbacks += 1
    if edit.replanned:
        state.replan_count += 1
    if edit.cursor is not None:
        state.cursor = edit.cursor
    if edit.phase is not None:
        state.phase = edit.phase


def fold_step(
    state: TaskState,
    edits: Iterable[Edit],
    *,
    progress: bool,
    elapsed_s: float,
    control: Mapping[str, Any],
) -> None:
    """Apply a step's edits in order, then count the step: its progress, the time and the
    task-level control's snapshot."""
    for edit in edits:
        _apply(state, edit)
    state.no_progress_steps = 0 if progress else state.no_progress_steps + 1
    state.step += 1
    state.elapsed_s = elapsed_s
    state.control = dict(control)
    state.failures = state.failures[-KEEP_FAILURES:]


def folded_copy(state: TaskState, edits: Iterable[Edit]) -> TaskState:
    """A copy of the state with ``edits`` applied; the state itself is left as it is."""
    copy = state.model_copy(deep=True)
    for edit in edits:
        _apply(copy, edit)
    return copy


def fold_end(state: TaskState, halt: HaltReason, *, answer: str | None, elapsed_s: float) -> None:
    """The run ends on ``halt``: a task frozen for a human stays resumable, any other is done."""
    state.halt = halt.value
    state.elapsed_s = elapsed_s
    frozen = halt is HaltReason.HANDOVER and state.handover_id is not None
    if not (frozen and state.status == "frozen"):
        state.status = "done"
    if answer is not None:
        state.answer = answer


def field_errors(
    required: Sequence[RequiredField], fields: Mapping[str, Any]
) -> dict[str, list[str]]:
    """What is wrong with each filled required field (an unfilled one is not listed)."""
    return {
        name: problems
        for name, problems in field_problems(required, fields).items()
        if name in fields and fields[name] is not None
    }


def new_state(
    spec: Task,
    *,
    task_id: str,
    run_id: str,
    session_id: str,
    prompt: str,
    mode: str,
) -> TaskState:
    """The state a task starts with: its fields pre-filled from the task's context (checked
    by :func:`fold_fields` once the state is stored)."""
    return TaskState(
        task_id=task_id,
        run_id=run_id,
        session_id=session_id,
        prompt=prompt,
        mode=mode,
        phase="collecting" if mode == "react" else "planning",
        required_fields={f.name: spec.context.get(f.name) for f in spec.required_fields},
        required_spec=[
            {"name": f.name, "description": f.description, "schema": f.schema, "source": f.source}
            for f in spec.required_fields
        ],
        effect_ledger={"namespace": "ledger", "prefix": f"{task_id}/"},
    )


def fold_fields(state: TaskState, required: Sequence[RequiredField]) -> None:
    """Check the state's required fields against the task's (a resumed or recovered task)."""
    state.field_errors = field_errors(required, state.required_fields)


def fold_recovery(state: TaskState) -> None:
    """One more recovery: the save that follows fences out a writer that was only slow."""
    state.recoveries += 1


def fold_decision(item: HandoverItem, state: TaskState) -> Confirmation | None:
    """Apply a human decision to a frozen state; the confirmation the frozen tool call runs
    with. Reject: the task is done. Edit: the edits change the frozen action or the state."""
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
