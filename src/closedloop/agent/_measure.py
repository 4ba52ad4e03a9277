"""The measure stage: the step's error e ∈ [0, 1] and everything the acting concluded.

A tool's observation goes into the state (``_observe.py``), a success is remembered,
the rules look at a poor answer (``_gate.py``), and the tool's error metric measures it;
an event bus that escalates hands the task over with what was measured. A plan mode's
judge says what the outcome means for the plan; when the tool's answer completes the
task (every required field filled, or the configured predicate), the run ends with an
answer built from it. The other decisions have a fixed error: 1 for a refusal or a
repeat, 0 for a skip or an accepted answer; a cut-off call or a handover measures nothing.

:class:`Outcome` is all the control, record and fold stages read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ..perception import Observation, ObservationStatus
from ._act import Acted, accept_answer, text_of
from ._actuators import FINAL, act_key
from ._decide import Abstain, Answer, Call, CloseOnRepeat, Cut, Refuse, Repeat, Settle, Skip
from ._fold import Edit, EffectKey, Noted, PlanEdit
from ._gate import advise
from ._handover import freeze
from ._observe import absorb
from ._projection import summarise_observation
from ._records import ActionCall, HaltReason
from ._state import field_problems
from ._tools import Tool
from ._view import Judged, ModelReply, RuleAdvice, View

if TYPE_CHECKING:
    from ..control import ActuatorSettings
    from ._run import Run

__all__ = ["Outcome", "completed_answer", "error_of", "measure"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """What the acting stages concluded; ``control``, ``record`` and the fold read only this.

    ``step_type`` is the acting key and ``error`` its measured error. ``proposal_error``,
    when set, is fed first to ``proposing_key``. ``settings`` are the ones the action ran
    under (the tool's), or None for the proposal's. ``measured=False``: nothing was
    measured, the controllers hold. ``fields`` are the required fields after the step
    (None: as they were); ``edits`` everything the step changes in the task state, in
    order; ``advice`` the rule a failed read earned (``observed``: the rules looked).
    """

    reply: ModelReply
    proposing_key: str
    step_type: str
    phase: str
    error: float = 0.0
    measured: bool = True
    proposal_error: float | None = None
    settings: ActuatorSettings | None = None
    action: ActionCall | None = None
    final_answer: str | None = None
    validation_errors: Sequence[str] = ()
    observation: dict[str, Any] | None = None
    notes: Sequence[str] = ()
    progress: bool = False
    halt: HaltReason | None = None
    retries: Sequence[Mapping[str, Any]] = field(default_factory=tuple)
    fields: Mapping[str, Any] | None = None
    edits: tuple[Edit, ...] = ()
    acted: tuple[str, ...] = ()
    advice: RuleAdvice | None = None
    observed: bool = False
    confirmed: bool = False  # a human's confirmation went with a tool call


async def measure(run: Run, view: View, reply: ModelReply, acted: Acted) -> Outcome:
    """The outcome of the step (see the module)."""
    p, decision, ran = reply.proposal, acted.decided.decision, acted.ran
    edits = (*view.edits, *reply.edits, *acted.decided.edits, *acted.edits)
    if ran is not None and ran.effect_key is not None:
        edits = (*edits, EffectKey(ran.effect_key))
    base = Outcome(
        reply=reply,
        proposing_key=view.key,
        step_type=view.key,
        phase=view.phase,
        action=p.call,
        fields=acted.fields,
        edits=edits,
        acted=(*acted.decided.acted, *(ran.acted if ran is not None else ())),
        confirmed=ran is not None and ran.confirmation_used,
    )
    if acted.frozen is not None:
        return _with(base, measured=False, notes=(acted.frozen,), halt=HaltReason.HANDOVER)
    match decision:
        case Cut(halt):
            note = f"the model call was cut off ({halt.value})"
            return _with(base, error=1.0, measured=False, notes=(note,), halt=halt, action=None)
        case Abstain(answer, note):
            return _with(
                base,
                measured=False,
                notes=(note,),
                final_answer=answer,
                halt=HaltReason.ABSTAINED,
                action=None,
            )
        case Settle(note, plan):
            planned = () if plan is None else (PlanEdit(steps=plan, cursor=0, phase="executing"),)
            return _with(base, notes=(note,), progress=True, action=None, edits=planned)
        case Refuse(errors):
            said = Noted(("your last reply was refused: " + "; ".join(errors),), errors)
            judged = await _judge(run, view, p.call, None, base)
            return _with(
                base,
                error=1.0,
                validation_errors=errors,
                notes=(*p.notes, *judged.notes),
                halt=judged.halt,
                edits=(said, *judged.edits),
            )
        case Skip(note):
            judged = await _judge(run, view, p.call, None, base)
            return _with(
                base,
                notes=(note, *judged.notes),
                halt=judged.halt,
                edits=(Noted((note,)), *judged.edits),
            )
        case Repeat(repeats):
            return await _repeat(run, view, repeats, base)
        case CloseOnRepeat():
            return _with(base, final_answer=acted.answer, notes=acted.notes, halt=HaltReason.FINAL)
        case Answer():
            return await _answer(run, view, acted, base)
        case Call(tool, call):
            return await _observed(run, view, acted, tool, call, base)
    raise AssertionError(decision)  # pragma: no cover - every decision is matched above


def _with(base: Outcome, *, edits: tuple[Edit, ...] = (), **changes: Any) -> Outcome:
    """``base`` with ``changes``, and ``edits`` after its own."""
    return replace(base, edits=(*base.edits, *edits), **changes)


async def _judge(
    run: Run,
    view: View,
    action: ActionCall | None,
    observation: Observation | None,
    base: Outcome,
) -> Judged:
    """What the mode's judge makes of the step (nothing, outside the plan modes)."""
    judge = view.ask.judge
    if judge is None:
        return Judged()
    return await judge(action, observation, view.condition_view(run, base.fields))


async def _repeat(run: Run, view: View, repeats: int, base: Outcome) -> Outcome:
    call = base.action
    assert call is not None
    hint = (
        f"{call.tool} was proposed again with the same arguments (timestamps and ids "
        f"ignored; repeat {repeats}); it was not run again. Its answer is above: if it "
        "completes the task, answer from it; otherwise change the arguments or call "
        "another tool."
    )
    said = Noted((hint,), (f"repeated action {call.tool} ({repeats}x)",))
    judged = await _judge(run, view, call, None, base)
    return _with(
        base,
        error=1.0,
        notes=(hint, *judged.notes),
        halt=judged.halt,
        edits=(said, *judged.edits),
    )


async def _answer(run: Run, view: View, acted: Acted, base: Outcome) -> Outcome:
    p = base.reply.proposal
    if acted.refused:
        judged = await _judge(run, view, p.call, None, base)
        return _with(
            base,
            proposal_error=1.0,
            step_type=FINAL,
            error=1.0,
            validation_errors=acted.refused,
            notes=(*p.notes, *judged.notes),
            progress=acted.progress,
            halt=judged.halt,
            edits=judged.edits,
        )
    return _with(
        base,
        proposal_error=0.0,
        step_type=FINAL,
        final_answer=acted.answer,
        notes=acted.notes,
        progress=True,
        halt=HaltReason.FINAL,
    )


def error_of(
    run: Run, tool: Tool, call: ActionCall, observation: Observation
) -> tuple[float, str | None]:
    """The step's error e ∈ [0, 1] under the tool's metric; a metric that raises reads as
    an error of 1 (and a failure to note), never ends the run."""
    try:
        return float(run.settings.control.metric_for(tool.name)(call, observation)), None
    except Exception as exc:
        return 1.0, f"metric for {tool.name} raised {type(exc).__name__}: {exc}"


async def _observed(
    run: Run, view: View, acted: Acted, tool: Tool, call: ActionCall, base: Outcome
) -> Outcome:
    ran = acted.ran
    assert ran is not None
    base = replace(base, step_type=act_key(tool.name), settings=acted.settings, retries=ran.retries)
    observation = ran.observation
    if observation is None or ran.outcome is None:
        note = f"the call to {tool.name} was cut off ({ran.halt})"
        return _with(base, error=1.0, measured=False, notes=(note,), halt=ran.halt)
    seen = absorb(run, tool, call, observation)
    state = run.state
    if seen.progress and observation.status is ObservationStatus.OK:
        summary = summarise_observation(seen.dumped)
        await run.memory.remember(
            tool.name,
            run_id=state.run_id,
            task=state.prompt,
            arguments=call.arguments,
            observed=summary,
        )
    guard, advice = await advise(
        run, observation, call, seen.earlier, step=view.step, attempts=1 + len(ran.retries)
    )
    error, broken = error_of(run, tool, call, observation)
    edits = [
        *seen.edits,
        *([Noted((guard,))] if guard else []),
        *([Noted(failures=(broken,))] if broken else []),
    ]
    base = replace(
        base, fields=seen.fields, observation=seen.dumped, error=error, advice=advice, observed=True
    )
    if ran.escalation is not None:  # the event bus's answer: a human takes over
        why = f"the event bus escalated: {ran.escalation}"
        note, frozen = await freeze(run, view, base.reply.proposal, why, (*base.edits, *edits))
        return _with(
            base, measured=False, notes=(note,), halt=HaltReason.HANDOVER, edits=(*edits, frozen)
        )
    base = replace(base, progress=seen.progress)
    after = view.condition_view(run, seen.fields, [*seen.earlier, seen.entry])
    return await _concluded(run, view, tool, call, observation, base, after, tuple(edits), guard)


async def _concluded(
    run: Run,
    view: View,
    tool: Tool,
    call: ActionCall,
    observation: Observation,
    base: Outcome,
    after: Mapping[str, Any],
    edits: tuple[Edit, ...],
    guard: str | None,
) -> Outcome:
    """A tool's observed outcome: the plan's judge (on the state as the step leaves it,
    ``after``), then the completion predicate."""
    ran_retries = base.retries
    retry_notes = (
        (
            f"{tool.name} was asked {len(ran_retries)} more time(s) after a passing fault, "
            "a broken connection or an empty answer",
        )
        if ran_retries
        else ()
    )
    fields = base.fields if base.fields is not None else run.state.required_fields
    judge = view.ask.judge
    judged = await judge(call, observation, after) if judge is not None else Judged()
    # A plan mode ends on the predicate only once its plan is carried out: a later
    # plan step may still act on the fields this call completed.
    finishing = judged.halt is None and (judged.phase or view.phase) == "finishing"
    done, broken = (
        completed_answer(run, call, observation, fields)
        if judge is None or finishing
        else (None, None)
    )
    notes, halt, answer = list(judged.notes), judged.halt, None
    if done is not None:
        said = ["the task's completion predicate holds after this call: the run ends"]
        answer, done_notes = await accept_answer(run, done, said, fields)
        notes, halt = [*notes, *done_notes], HaltReason.FINAL
    reply = base.reply
    return _with(
        base,
        # A call a rule made measures nothing about the model's proposing.
        proposal_error=None if reply.ruled_by is not None else 0.0,
        final_answer=answer,
        notes=(*reply.proposal.notes, *((guard,) if guard else ()), *retry_notes, *notes),
        halt=halt,
        edits=(*edits, *judged.edits, *((Noted(failures=(broken,)),) if broken else ())),
    )


def completed_answer(
    run: Run, call: ActionCall, observation: Observation, fields: Mapping[str, Any]
) -> tuple[str | None, str | None]:
    """The answer when this tool's observation makes the task's completion predicate
    hold (every required field filled and valid, and no tool kept for the committing
    phase; or, without required fields, the configured predicate), else None: the run
    then ends on it instead of asking the model again. Second: a predicate that raised
    (it reads as "not yet"), to note."""
    config = run.settings.control
    required = run.task.required_fields
    if required:
        if not config.end_when_complete or field_problems(required, fields):
            return None, None
        if any(
            t.phases is not None and "committing" in t.phases and "collecting" not in t.phases
            for t in run.settings.tools.values()
        ):
            return None, None  # a tool that acts on the complete fields has yet to run
        if len(required) == 1:
            return text_of(fields[required[0].name]), None
        return text_of({f.name: fields[f.name] for f in required}), None
    predicate = config.completion_predicate
    if predicate is None or observation.status is not ObservationStatus.OK:
        return None, None
    try:
        done = bool(predicate(call, observation))
    except Exception as exc:  # a predicate that raises reads as "not yet", noted
        return None, f"completion predicate raised {type(exc).__name__}: {exc}"
    return (text_of(observation.value) if done else None), None
