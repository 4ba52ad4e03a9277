"""The act stage: the decision carried out.

A tool call runs through the tool port (``_tool_port.py``) under the tool's own settings,
handed forward from its last update, in a narrow per-call context; a call the executor
holds for a human confirmation freezes the task. A final answer is accepted only when
every required field is filled and valid (a field reserved for a tool must equal that
tool's observed value), then formatted and remembered. A handover freezes the task. The
other decisions (a refusal, a skip, a repeat, a settled step) act on nothing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ..control import ActuatorSettings
from ..control import Protocol as DefenceProtocol
from ..execution import OutcomeStatus
from ._actuators import act_key
from ._decide import Answer, Call, CloseOnRepeat, Decided, HandOver
from ._fold import Edit, Filled, Noted, Signed, field_errors
from ._handover import freeze
from ._protocols import same_value
from ._state import field_problems
from ._tool_port import CallContext, ToolRun
from ._view import ModelReply, View

if TYPE_CHECKING:
    from ._run import Run

__all__ = ["Acted", "accept_answer", "act", "text_of"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Acted:
    """What the act stage did: the tool's run under its settings, an answer accepted (or
    why one was refused), the task frozen for a human (``frozen``: the note), or nothing;
    the required fields after it, notes for the record, its edits."""

    decided: Decided
    ran: ToolRun | None = None
    settings: ActuatorSettings | None = None
    answer: str | None = None
    refused: tuple[str, ...] = ()
    fields: Mapping[str, Any] | None = None
    progress: bool = False
    frozen: str | None = None
    notes: tuple[str, ...] = ()
    edits: tuple[Edit, ...] = ()


def text_of(value: Any) -> str:
    """A value as the text of an answer."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


async def act(run: Run, view: View, reply: ModelReply, decided: Decided) -> Acted:
    """Carry out ``decided`` (see the module)."""
    done = (*view.edits, *reply.edits, *decided.edits)
    match decided.decision:
        case HandOver(reason):
            note, frozen = await freeze(run, view, reply.proposal, reason, done)
            return Acted(decided=decided, frozen=note, edits=(frozen,))
        case Answer():
            return await _answer(run, reply, decided)
        case CloseOnRepeat(earlier):
            call = reply.proposal.call
            said = (
                f"{call.tool if call else 'the tool'} was proposed again with the same "
                "arguments after it succeeded: the run ends with its result"
            )
            fields = run.state.required_fields
            answer, notes = await accept_answer(run, text_of(earlier.get("value")), [said], fields)
            return Acted(decided=decided, answer=answer, notes=tuple(notes))
        case Call():
            return await _call(run, view, reply, decided, done)
    return Acted(decided=decided)


def take_fields(
    run: Run, given: Mapping[str, Any]
) -> tuple[dict[str, list[str]], bool, dict[str, Any]]:
    """The required fields a final answer gives, taken where valid; a field reserved for a
    tool (``RequiredField.source``) must equal that tool's observed value. Returns what is
    still wrong per field, whether the task came closer to complete, and the fields after."""
    required, current = run.task.required_fields, run.state.required_fields
    specs = {f.name: f for f in required}
    given = {k: v for k, v in given.items() if k in specs}
    sourced: dict[str, list[str]] = {}
    for name in list(given):
        source = specs[name].source
        if source is not None and not same_value(given[name], current.get(name)):
            sourced[name] = [f"must come from {source}'s answer, not from the model"]
            del given[name]
    before = len(required) - len(field_problems(required, current))
    merged = {**current, **given}
    problems = {**field_problems(required, merged), **sourced}
    fields = {**current, **{n: v for n, v in given.items() if n not in problems}}
    after = len(required) - len(field_problems(required, fields))
    return problems, after > before, fields


async def _answer(run: Run, reply: ModelReply, decided: Decided) -> Acted:
    p = reply.proposal
    problems, progress, fields = take_fields(run, p.fields)
    filled = Filled(fields, field_errors(run.task.required_fields, fields))
    if problems:
        text = "; ".join(f"{n}: {', '.join(ps)}" for n, ps in problems.items())
        note = (
            f"final answer refused: the task is not complete ({text}); every required field "
            "needs a validated value first"
        )
        return Acted(
            decided=decided,
            refused=(note,),
            fields=fields,
            progress=progress,
            edits=(filled, Noted((note,), (note,))),
        )
    answer, notes = await accept_answer(run, p.answer or "", list(p.notes), fields)
    return Acted(
        decided=decided,
        answer=answer,
        fields=fields,
        progress=True,
        notes=tuple(notes),
        edits=(filled,),
    )


async def accept_answer(
    run: Run, answer: str, notes: list[str], fields: Mapping[str, Any]
) -> tuple[str, list[str]]:
    """An accepted answer, formatted (unless dimension reduction skips it) and
    remembered: ``(answer, notes)``."""
    state = run.state
    fmt = run.settings.format_answer
    if fmt is not None:
        if run.control.protocol is DefenceProtocol.DIMENSION_REDUCTION:
            notes.append("dimension reduction: the non-core formatting was skipped; plain result")
        else:
            answer = fmt(answer, dict(fields))
    await run.memory.remember(
        "final", run_id=state.run_id, task=state.prompt, arguments=fields, observed=answer
    )
    return answer, notes


async def _call(
    run: Run, view: View, reply: ModelReply, decided: Decided, done: tuple[Edit, ...]
) -> Acted:
    assert isinstance(decided.decision, Call)
    tool, call = decided.decision.tool, decided.decision.call
    state, carry = run.state, view.carry
    settings = await run.controllers.settings(carry.actuators, act_key(tool.name))
    if reply.timeout_factor != 1.0:
        settings = replace(settings, timeout_ms=settings.timeout_ms * reply.timeout_factor)
    if reply.retry_cap is not None and settings.max_retries > reply.retry_cap:
        settings = replace(settings, max_retries=reply.retry_cap)
    ctx = CallContext(
        task_id=state.task_id,
        session_id=state.session_id,
        step=view.step,
        view=view.condition_view(run),
        settings=settings,
        error=carry.actuators.error(act_key(tool.name)) or 0.0,
        confirmation=carry.confirmation,
        latest=state.observations[-1] if state.observations else None,
    )
    ran = await run.tool_io.run(tool, call, ctx)
    outcome = ran.outcome
    if outcome is not None and outcome.status is OutcomeStatus.CONFIRMATION_REQUIRED:
        # Nothing ran: once confirmed, the same call must not count as a repeat.
        unsigned = Signed(None, 0)
        why = f"{tool.name} needs a human confirmation before it runs"
        note, frozen = await freeze(run, view, reply.proposal, why, (*done, unsigned))
        return Acted(decided=decided, ran=ran, frozen=note, edits=(unsigned, frozen))
    return Acted(decided=decided, ran=ran, settings=settings)
