"""What every step shares after the proposal: refusal, handover, final answer, tool call.

The order puts validation first: validate before anything runs (schema, phase, dependencies) →
final answer? (a code predicate decides) → repeated action? → execute → observe. Each
function ends the step through ``Run.close_step``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from ..control import Protocol
from ..execution import EffectClass, OutcomeStatus
from ..feedback import HandoverQueue
from ..perception import Observation, ObservationStatus
from ._actions import Proposal
from ._io import ModelReply, absorb, execute, propose
from ._loop import Run
from ._projection import summarise_observation
from ._protocols import same_value
from ._records import ActionCall, HaltReason, RunUsageSummary, StepRecord
from ._repeats import action_signature, count_repeats
from ._state import PendingAction, field_problems
from ._tools import Tool
from ._trace import build_audit

__all__ = [
    "NO_USAGE",
    "Judge",
    "ask",
    "close",
    "freeze",
    "handle",
    "refuse",
    "try_final",
    "try_tool",
    "visible_tools",
]

Judge = Callable[
    [ActionCall | None, Observation | None], Awaitable[tuple[list[str], HaltReason | None]]
]
"""Plan modes decide what a step's outcome means for the plan (advance, send back, replan)."""
NO_USAGE = RunUsageSummary()


def visible_tools(run: Run) -> list[Tool]:
    """The tools the model is shown: under dimension reduction, the core ones only."""
    tools = list(run.settings.tools.values())
    if run.control.protocol is Protocol.DIMENSION_REDUCTION:
        return [t for t in tools if t.core]
    return tools


async def reply_from_pending(run: Run, pending: PendingAction, key: str) -> ModelReply:
    """The frozen action, as a human decided it, in place of a new proposal."""
    u = await run.bank.output(key)
    if pending.kind == "tool" and pending.tool is not None:
        proposal = Proposal("tool", call=ActionCall(tool=pending.tool, arguments=pending.arguments))
    else:
        proposal = Proposal("final", answer=pending.answer, fields=pending.fields)
    note = "the action frozen for a human decision, as decided"
    return ModelReply(
        Proposal(proposal.kind, proposal.call, proposal.answer, proposal.fields, notes=(note,)),
        NO_USAGE,
        run.settings.control.schedule(u),
        u,
    )


async def ask(
    run: Run,
    kinds: frozenset[str],
    schema: Callable[[bool], Mapping[str, Any]],
    key: str,
    notes: tuple[str, ...] = (),
) -> ModelReply:
    """This step's proposal: the frozen action after a resume, else the model's."""
    if run.pending is not None:
        pending, run.pending = run.pending, None
        run.state.pending = None
        return await reply_from_pending(run, pending, key)
    return await propose(
        run, kinds, schema=schema, visible=visible_tools(run), key=key, notes=notes
    )


async def close(run: Run, reply: ModelReply, key: str, error: float, **kw: Any) -> StepRecord:
    """``Run.close_step`` with the proposal's usage and actuator settings filled in."""
    kw.setdefault("model_u", reply.u)
    return await run.close_step(
        step_type=kw.pop("step_type", key),
        error=error,
        u_used=kw.pop("u_used", reply.u),
        settings=kw.pop("settings", reply.settings),
        usage=reply.usage,
        strict=reply.strict,
        **kw,
    )


async def refuse(
    run: Run, reply: ModelReply, key: str, errors: list[str], phase: str, judge: Judge | None
) -> StepRecord:
    """Refuse the proposal: nothing runs; the reasons are the model's next observation."""
    run.state.failures.extend(errors)
    run.state.notes.append("your last reply was refused: " + "; ".join(errors))
    notes, halt = await judge(reply.proposal.call, None) if judge else ([], None)
    return await close(
        run,
        reply,
        key,
        1.0,
        validation_errors=errors,
        action=reply.proposal.call,
        notes=[*reply.proposal.notes, *notes],
        phase=phase,
        halt=halt,
    )


async def freeze(run: Run, reply: ModelReply, key: str, phase: str, reason: str) -> StepRecord:
    """MANUAL_HANDOVER: freeze the task with its pending action and queue an audit."""
    state = run.state
    p = reply.proposal
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
    note = f"handed over to a human ({reason}); handover id {state.handover_id}"
    return await close(
        run,
        reply,
        key,
        0.0,
        measured=False,
        action=p.call,
        notes=[note],
        phase=phase,
        halt=HaltReason.HANDOVER,
    )


async def try_final(
    run: Run, reply: ModelReply, key: str, phase: str, judge: Judge | None
) -> StepRecord:
    state = run.state
    p = reply.proposal
    specs = {f.name: f for f in run.task.required_fields}
    given = {k: v for k, v in p.fields.items() if k in specs}
    sourced: dict[str, list[str]] = {}
    for name in list(given):
        source = specs[name].source
        if source is not None and not same_value(given[name], state.required_fields.get(name)):
            sourced[name] = [f"must come from {source}'s answer, not from the model"]
            del given[name]
    before = run.complete_count()
    merged = {**state.required_fields, **given}
    problems = {**field_problems(run.task.required_fields, merged), **sourced}
    for name, value in given.items():
        if name not in problems:
            state.required_fields[name] = value
    run.refresh_fields()
    progress = run.complete_count() > before
    if problems:
        text = "; ".join(f"{n}: {', '.join(ps)}" for n, ps in problems.items())
        note = (
            f"final answer refused: the task is not complete ({text}); every required field "
            "needs a validated value first"
        )
        state.notes.append(note)
        state.failures.append(note)
        await run.bank.update(key, 1.0)
        notes, halt = await judge(reply.proposal.call, None) if judge else ([], None)
        return await close(
            run,
            reply,
            key,
            1.0,
            step_type="final",
            validation_errors=[note],
            notes=[*p.notes, *notes],
            progress=progress,
            phase=phase,
            halt=halt,
        )
    answer = p.answer or ""
    notes = list(p.notes)
    fmt = run.settings.format_answer
    if fmt is not None:
        if run.control.protocol is Protocol.DIMENSION_REDUCTION:
            notes.append("dimension reduction: the non-core formatting was skipped; plain result")
        else:
            answer = fmt(answer, dict(state.required_fields))
    await run.bank.update(key, 0.0)
    await run.memory.remember(
        "final",
        run_id=state.run_id,
        task=state.prompt,
        arguments=state.required_fields,
        observed=answer,
    )
    return await close(
        run,
        reply,
        key,
        0.0,
        step_type="final",
        final_answer=answer,
        notes=notes,
        progress=True,
        phase=phase,
        halt=HaltReason.FINAL,
    )


async def try_tool(
    run: Run, reply: ModelReply, key: str, phase: str, judge: Judge | None
) -> StepRecord:
    state = run.state
    call = reply.proposal.call
    assert call is not None
    errors = run.validator.call_errors(call, phase=state.phase, latest=state.latest())
    if errors:
        return await refuse(run, reply, key, errors, phase, judge)
    tool = run.settings.tools[call.tool]
    if run.control.protocol is Protocol.DIMENSION_REDUCTION and not tool.core:
        note = f"dimension reduction: {tool.name} is not a core step and was skipped"
        state.notes.append(note)
        notes, halt = await judge(reply.proposal.call, None) if judge else ([], None)
        return await close(
            run, reply, key, 0.0, action=call, notes=[note, *notes], phase=phase, halt=halt
        )
    signature = action_signature(call.tool, call.arguments)
    repeats = count_repeats(signature, state.signatures, run.settings.repeat_window)
    if repeats and _retry_after_fault(run, tool, signature):
        repeats = 0  # asking again after a passing fault is a retry, not a loop
    state.signatures = [*state.signatures, signature][-32:]
    state.repeat_count = repeats
    if repeats:
        hint = (
            f"{call.tool} was proposed again with the same arguments (timestamps and ids "
            f"ignored; repeat {repeats}); it was not run again. Its answer is above. Change "
            "strategy: other arguments, another tool, or a final answer saying what is missing."
        )
        state.notes.append(hint)
        state.failures.append(f"repeated action {call.tool} ({repeats}x)")
        notes, halt = await judge(reply.proposal.call, None) if judge else ([], None)
        return await close(
            run, reply, key, 1.0, action=call, notes=[hint, *notes], phase=phase, halt=halt
        )
    observation, outcome, halt, settings, u = await execute(run, tool, call)
    retries = list(run.step_retries)
    if observation is None or outcome is None:
        return await close(
            run,
            reply,
            tool.name,
            1.0,
            measured=False,
            settings=settings,
            u_used=u,
            action=call,
            notes=[f"the call to {tool.name} was cut off ({halt})"],
            phase=phase,
            halt=halt,
            model_u=reply.u,
            retries=retries,
        )
    if outcome.status is OutcomeStatus.CONFIRMATION_REQUIRED:
        # Nothing ran: once confirmed, the same call must not count as a repeat.
        state.signatures = state.signatures[:-1]
        state.repeat_count = 0
        why = f"{tool.name} needs a human confirmation before it runs"
        return await freeze(run, reply, key, phase, why)
    await run.bank.update(key, 0.0)
    dumped, progress = absorb(run, tool, call, observation)
    try:
        error = float(run.settings.control.metric_for(tool.name)(call, observation))
    except Exception as exc:  # a broken metric must not end the run; it reads as an error
        error = 1.0
        state.failures.append(f"metric for {tool.name} raised {type(exc).__name__}: {exc}")
    if progress and observation.status is ObservationStatus.OK:
        await run.memory.remember(
            tool.name,
            run_id=state.run_id,
            task=state.prompt,
            arguments=call.arguments,
            observed=summarise_observation(dumped),
        )
    guard = await run.guard(observation)
    retry_notes = (
        [
            f"{tool.name} was asked {len(retries)} more time(s) after a passing fault or an empty answer"
        ]
        if retries
        else []
    )
    notes, judged = await judge(call, observation) if judge else ([], None)
    return await close(
        run,
        reply,
        tool.name,
        error,
        settings=settings,
        u_used=u,
        model_u=reply.u,
        action=call,
        observation=dumped,
        notes=[*reply.proposal.notes, *guard, *retry_notes, *notes],
        progress=progress,
        phase=phase,
        halt=judged,
        retries=retries,
    )


def _retry_after_fault(run: Run, tool: Tool, signature: str) -> bool:
    """The same read again, right after its last answer was a passing fault: let it run,
    a bounded number of times (``ReadRetry.repeats_after_fault``) so a real loop stops."""
    if tool.effect is not EffectClass.RECOMPUTABLE or not run.state.observations:
        return False
    last = run.state.observations[-1]
    if last.tool != tool.name or action_signature(last.tool, last.arguments) != signature:
        return False
    status = str(last.observation.get("status", ""))
    if status not in _FAULTS and not (
        status == ObservationStatus.ERROR.value and run.recent_faults.get(tool.name) == last.step
    ):
        return False
    used = run.fault_repeats.get(signature, 0)
    if used >= run.settings.read_retry.repeats_after_fault:
        return False
    run.fault_repeats[signature] = used + 1
    return True


_FAULTS = frozenset({ObservationStatus.TIMEOUT.value, ObservationStatus.RATE_LIMITED.value})


async def handle(
    run: Run, reply: ModelReply, key: str, phase: str, judge: Judge | None = None
) -> StepRecord:
    """Everything after the proposal: halt, handover, validation, final or tool."""
    if reply.halt is not None:
        return await close(
            run,
            reply,
            key,
            1.0,
            measured=False,
            phase=phase,
            halt=reply.halt,
            notes=[f"the model call was cut off ({reply.halt.value})"],
        )
    if run.control.protocol is Protocol.MANUAL_HANDOVER:
        reason = f"f_est {run.control.f_est:.2f} reached the manual-handover level"
        return await freeze(run, reply, key, phase, reason)
    p = reply.proposal
    if p.kind == "invalid":
        return await refuse(run, reply, key, list(p.errors) or ["no usable reply"], phase, judge)
    kind_errors = run.validator.kind_errors(run.state.phase, p.kind)
    if kind_errors:
        return await refuse(run, reply, key, kind_errors, phase, judge)
    if p.kind == "final":
        return await try_final(run, reply, key, phase, judge)
    return await try_tool(run, reply, key, phase, judge)
