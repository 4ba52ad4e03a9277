"""Plan-and-execute and planner/executor/reviewer: plans, cursors, reviews and replans.

The model writes a structured plan that is validated as a whole; code runs it step by
step. Replans are counted and bounded, and a Lyapunov monitor on task quality across
replans ends a run whose replans keep making things worse.
"""

from __future__ import annotations

from ..control import Protocol
from ..perception import Observation, ObservationStatus
from ._actions import Proposal, action_schema, plan_schema
from ._io import ModelReply
from ._loop import Run
from ._records import ActionCall, HaltReason, StepRecord
from ._review import ReviewRequest, ReviewVerdict, review
from ._state import PlanStep
from ._steps import NO_USAGE, ask, close, handle, refuse, visible_tools

__all__ = ["plan_step"]


async def _replan(run: Run, reason: str) -> tuple[list[str], HaltReason | None]:
    state = run.state
    if state.plan and state.cursor < len(state.plan):
        state.plan[state.cursor].status = "failed"
    state.replan_count += 1
    verdict = run.control.observe_replan(run.completion())
    if state.replan_count > run.settings.max_replans:
        return [
            f"replan limit reached ({run.settings.max_replans}): {reason}"
        ], HaltReason.NO_PROGRESS
    if verdict.should_stop:
        return ["task quality fell across consecutive replans (Lyapunov)"], HaltReason.NO_PROGRESS
    state.phase = "planning"
    state.cursor = 0
    note = f"replanning (#{state.replan_count}): {reason}"
    state.notes.append(note)
    return [note], None


async def _planning(run: Run) -> StepRecord:
    state = run.state
    visible = visible_tools(run)
    key = "plan"
    reply = await ask(
        run, frozenset({"plan"}), lambda _: plan_schema(visible, run.settings.max_plan_steps), key
    )
    p = reply.proposal
    if (
        reply.halt is not None
        or run.control.protocol is Protocol.MANUAL_HANDOVER
        or p.kind != "plan"
    ):
        if p.kind not in ("plan", "invalid") and reply.halt is None:
            reply = ModelReply(
                Proposal("invalid", errors=(f"phase planning expects a plan, not a {p.kind}",)),
                reply.usage,
                reply.settings,
                reply.u,
                None,
                reply.strict,
            )
        return await handle(run, reply, key, "planning")
    errors = run.validator.plan_errors(p.plan, run.settings.max_plan_steps)
    if errors:
        return await refuse(run, reply, key, errors, "planning", None)
    state.plan = [
        PlanStep(
            tool=str(s["tool"]),
            arguments=dict(s.get("arguments") or {}),
            goal=str(s.get("goal", "")),
            core=bool(s.get("core", True)) and run.settings.tools[str(s["tool"])].core,
        )
        for s in p.plan
    ]
    state.plan_version += 1
    state.cursor = 0
    state.phase = "executing"
    note = f"plan v{state.plan_version} accepted: {len(state.plan)} step(s)"
    return await close(run, reply, key, 0.0, notes=[note], progress=True, phase="planning")


async def _executing(run: Run) -> StepRecord:
    state = run.state
    plan_step = state.plan[state.cursor]
    index = state.cursor
    reviewing = run.settings.mode == "plan_review"

    async def judge(
        action: ActionCall | None, observation: Observation | None
    ) -> tuple[list[str], HaltReason | None]:
        if observation is None or action is None:
            if not reviewing:
                return await _replan(run, f"plan step {index} ({plan_step.tool}) was refused")
            plan_step.sendbacks += 1
        else:
            if reviewing:
                request = ReviewRequest(plan_step, action, observation, state.condition_view())
                verdict = await review(run, request)
            else:
                ok = observation.status is ObservationStatus.OK
                verdict = ReviewVerdict(ok, "" if ok else f"answer was {observation.status.value}")
            if verdict.complete:
                plan_step.status = "done"
                state.cursor += 1
                if state.cursor >= len(state.plan):
                    state.phase = "finishing"
                return [f"plan step {index} complete"], None
            if not reviewing:
                return await _replan(run, f"plan step {index} failed: {verdict.reason}")
            plan_step.sendbacks += 1
            state.notes.append(f"the reviewer sent plan step {index} back: {verdict.reason}")
        if plan_step.sendbacks > run.settings.max_sendbacks:
            return await _replan(
                run, f"plan step {index} was sent back {plan_step.sendbacks} times"
            )
        return [f"plan step {index} sent back ({plan_step.sendbacks})"], None

    if run.control.protocol is Protocol.DIMENSION_REDUCTION and not plan_step.core:
        plan_step.status = "skipped"
        state.cursor += 1
        if state.cursor >= len(state.plan):
            state.phase = "finishing"
        u = await run.bank.output("plan")
        reply = ModelReply(Proposal("invalid"), NO_USAGE, run.settings.control.schedule(u), u)
        note = f"dimension reduction: skipped non-core plan step {index} ({plan_step.tool})"
        return await close(run, reply, "plan", 0.0, notes=[note], progress=True, phase="executing")
    if reviewing:
        key = "propose:executor"
        visible = visible_tools(run)
        hint = (
            f"Execute plan step {index}: {plan_step.goal or plan_step.tool}. Planned call: "
            f"{plan_step.tool}({plan_step.arguments})."
        )
        reply = await ask(
            run,
            frozenset({"tool"}),
            lambda strict: action_schema(visible, (), strict=strict, allow_final=False),
            key,
            (hint,),
        )
    else:
        key = "plan"
        if run.pending is not None:  # the frozen plan step, as a human decided it
            reply = await ask(run, frozenset({"tool"}), lambda _: {}, key)
        else:
            call = ActionCall(tool=plan_step.tool, arguments=plan_step.arguments)
            u = await run.bank.output(key)
            settings = run.settings.control.schedule(u)
            reply = ModelReply(Proposal("tool", call=call), NO_USAGE, settings, u)
    return await handle(run, reply, key, "executing", judge)


async def _finishing(run: Run) -> StepRecord:
    key = "propose:finishing"
    required = run.task.required_fields
    reply = await ask(
        run,
        frozenset({"final"}),
        lambda _: action_schema((), required, allow_tool=False),
        key,
    )

    async def judge(
        _action: ActionCall | None, _observation: Observation | None
    ) -> tuple[list[str], HaltReason | None]:
        return await _replan(run, "the final answer was refused")

    return await handle(run, reply, key, "finishing", judge)


async def plan_step(run: Run) -> StepRecord:
    """One step of plan-and-execute or planner/executor/reviewer."""
    state = run.state
    if state.phase not in ("planning", "executing", "finishing"):
        state.phase = "planning"
    if state.phase == "executing" and state.cursor >= len(state.plan):
        state.phase = "finishing"
    if state.phase == "planning":
        return await _planning(run)
    if state.phase == "executing":
        return await _executing(run)
    return await _finishing(run)
