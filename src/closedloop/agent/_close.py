"""The closing stages: control, the fold, the record, and what the step hands the next.

``control`` feeds the error to the PID of the outcome's key (the key scheme is in
``_actuators.py``: ``propose:<role>``, ``plan``, the tool's name, ``final``); the update
returns the key's next :class:`~closedloop.control.ActuatorSettings` inside a new
:class:`~closedloop.agent._actuators.Actuators` value, with the error that made it. A
step whose proposal got as far as an action (a tool that ran, a final answer judged)
feeds two keys: the proposing key with the proposal's error (0, or 1 for a final answer
refused as incomplete), then the acting key with the action's. A proposal refused before
anything ran (schema, phase, a repeat) feeds its proposing key alone. A step that
measured nothing (a call cut off, a freeze for a human) leaves every controller as it
was. The task-level observers (an extended state observer, Han 2009, Gao 2003 → f_est →
protocol; a Lyapunov monitor on task quality) read the control effort the action ran
under and the step's quality.

``fold`` writes the step's edits into the task state (``_fold.py``, its one writer) and
checks the run's ends; ``record`` is the step as the trace keeps it, with every signal
that crossed it; :func:`carried` is what the next step starts from.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..control import LyapunovVerdict
from ..control import Protocol as DefenceProtocol
from ._actuators import ControlUpdate
from ._fold import fold_step
from ._measure import Outcome
from ._observe import complete_count
from ._records import HaltReason, StepRecord
from ._view import Carry, View

if TYPE_CHECKING:
    from ._run import Run

__all__ = ["Controlled", "carried", "completion", "control", "fold", "record"]


@dataclass(frozen=True, slots=True)
class Controlled:
    """What the control stage concluded: the acting key's update (its ``actuators`` are
    the next step's), and the task-level reading (step quality, f_est, protocol, V)."""

    update: ControlUpdate
    error: float
    quality: float
    f_est: float
    protocol: DefenceProtocol
    lyapunov: LyapunovVerdict | None


def completion(run: Run, fields: Mapping[str, Any] | None = None) -> float | None:
    """The share of required fields ``fields`` (default: the state's) fill validly."""
    required = run.task.required_fields
    if not required:
        return None
    return complete_count(run, run.state.required_fields if fields is None else fields) / len(
        required
    )


async def control(run: Run, view: View, outcome: Outcome) -> Controlled:
    """Feed the PIDs (the proposing key, then the acting key) and the task-level
    observers; nothing is fed when nothing was measured."""
    controllers = run.controllers
    actuators = view.carry.actuators
    if outcome.proposal_error is not None:
        e_proposal = max(outcome.proposal_error, outcome.reply.disagreement)
        fed = await controllers.update(actuators, outcome.proposing_key, e_proposal)
        actuators = fed.actuators
    e = min(1.0, max(0.0, outcome.error))
    key = outcome.step_type
    ctl = run.control
    if not outcome.measured:  # nothing new was measured: the signals hold their values
        update = await controllers.held(actuators, key)
        e, quality = actuators.last if actuators.last is not None else (e, 1.0 - e)
        return Controlled(update, e, quality, ctl.f_est, ctl.protocol, ctl.steps.last)
    update = await controllers.update(actuators, key, e)
    u_used = (outcome.settings or outcome.reply.settings).u
    reading = ctl.observe(u_used, 1.0 - e, completion(run, outcome.fields))
    gate = run.settings.control.rule_gate
    keep = 1 if gate is None else gate.window + 1  # what the rule gate reads back
    measured = update.actuators.measured(key, e, reading.quality, keep)
    return Controlled(
        ControlUpdate(update.key, update.u, update.components, measured),
        e,
        reading.quality,
        reading.f_est,
        reading.protocol,
        reading.verdict,
    )


def fold(run: Run, outcome: Outcome, ctl: Controlled) -> HaltReason | None:
    """Write what the step changed into the task state and count the step; then why the
    run ends after it: the outcome's own reason, else a stop check on the state and the
    signals the step hands on."""
    fold_step(
        run.state,
        outcome.edits,
        progress=outcome.progress,
        elapsed_s=run.elapsed(),
        control=run.control.snapshot(),
    )
    return outcome.halt if outcome.halt is not None else run.stop_reason(ctl.update.actuators)


def record(
    run: Run, view: View, outcome: Outcome, ctl: Controlled, halt: HaltReason | None
) -> StepRecord:
    """The step as the trace keeps it, with every signal that crossed it (read after the
    fold: the state's clock and repeat count are the step's own)."""
    state = run.state
    reply = outcome.reply
    settings = outcome.settings or reply.settings
    actuators: dict[str, Any] = {
        **settings.as_dict(),
        "model": run.model_io.rung_model(reply.settings).name,
        "model_rung": run.model_io.ladder().index(reply.settings.rung),
        "model_votes": reply.usage.model_calls,
        "tool_calling": "native" if run.settings.native else "json",
        "constrained_decoding": reply.strict,
        "strictness_used": reply.level,
        "reasks": reply.reasks,
        "model_u": reply.u,
        "proposed_by": "model" if reply.ruled_by is None else f"rule:{reply.ruled_by}",
    }
    if reply.sampling is not None:
        actuators["sampling"] = dict(reply.sampling)
    if outcome.acted:  # actions taken on an estimate (_acting.py)
        actuators["acted"] = list(outcome.acted)
    said = (view.carry.note, reply.gate_note)
    lyapunov = ctl.lyapunov
    tool = None if outcome.action is None else run.settings.tools.get(outcome.action.tool)
    return StepRecord(
        run_id=state.run_id,
        task_id=state.task_id,
        step=view.step,
        t_s=state.elapsed_s,
        phase=outcome.phase or state.phase,
        mode=run.settings.mode,
        step_type=outcome.step_type,
        action=outcome.action,
        effect=None if tool is None else tool.effect.value,
        final_answer=outcome.final_answer,
        validation_errors=list(outcome.validation_errors),
        observation=outcome.observation,
        error=ctl.error,
        control=ctl.update.u,
        pid_components=ctl.update.components,
        quality=ctl.quality,
        f_est=ctl.f_est,
        protocol=ctl.protocol.value,
        actuators=actuators,
        lyapunov_v=None if lyapunov is None else lyapunov.V,
        lyapunov_dv=None if lyapunov is None else lyapunov.dV,
        repeat_count=state.repeat_count,
        retries=[dict(r) for r in outcome.retries],
        notes=[n for n in said if n is not None] + list(outcome.notes),
        usage=reply.usage,
        halt=halt,
        confidence=reply.confidence,
    )


def carried(view: View, outcome: Outcome, ctl: Controlled) -> Carry:
    """What the next step starts from: the settings and errors the controllers handed on,
    the rule a failed read earned (the last one, where this step neither ran a tool nor
    consulted the gate), a confirmation no call has used yet."""
    before = view.carry
    advice = outcome.advice if outcome.observed else None
    if not outcome.observed and not outcome.reply.gated:
        advice = before.advice
    confirmation = None if outcome.confirmed else before.confirmation
    return Carry(ctl.update.actuators, advice, confirmation)
