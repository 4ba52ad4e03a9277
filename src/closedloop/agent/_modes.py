"""The three control granularities, as arrangements of the same stages of one ``Step``.

``react``: every step the model sees the newest observations and proposes one action.
``plan_execute``: the model writes a structured, validated plan; code runs it step by
step; the model comes back only to replan (counted and bounded) and to answer.
``plan_review``: planner, executor and reviewer; the reviewer (code or a model) checks
each step's completion condition and can send the step back.

Each arrangement chooses what the step proposes (and under which key), then hands the
proposal to :meth:`Step.finish`; the plan modes add a judge that decides what the
outcome means for the plan. A Lyapunov monitor on task quality across replans ends a
run whose replans keep making things worse.
"""

from __future__ import annotations

from ..control import Protocol
from ..perception import Observation, ObservationStatus
from ._actions import Proposal, action_schema, plan_schema
from ._actuators import PLAN, propose_key
from ._records import ActionCall, HaltReason, StepRecord
from ._review import ReviewRequest, ReviewVerdict, review
from ._run import Run
from ._state import PlanStep
from ._step import NO_USAGE, ModelReply, Step

__all__ = ["MODES", "plan_step", "react_step", "step"]

MODES = ("react", "plan_execute", "plan_review")


async def step(run: Run) -> StepRecord:
    """One step of the run's mode, from the settings the last step handed on."""
    one = Step(run, run.actuators)
    if run.settings.mode == "react":
        return await react_step(one)
    return await plan_step(one)


async def react_step(step: Step) -> StepRecord:
    """One ReAct step: propose, validate, act, observe, measure, control."""
    run = step.run
    run.state.phase = run.phase_for_react()
    key = propose_key("react")
    visible = await step.shown_tools(key)
    required = run.task.required_fields
    reply = await step.propose(
        frozenset({"tool", "final"}),
        lambda strict: action_schema(
            visible, required, strict=strict, allow_final=step.answer_open(), **step.bounds()
        ),
        key,
    )
    return await step.finish(reply, key, run.state.phase)


# --- plan-and-execute, planner / executor / reviewer ------------------------------------


async def plan_step(step: Step) -> StepRecord:
    """One step of plan-and-execute or planner/executor/reviewer."""
    state = step.run.state
    if state.phase not in ("planning", "executing", "finishing"):
        state.phase = "planning"
    if state.phase == "executing" and state.cursor >= len(state.plan):
        state.phase = "finishing"
    if state.phase == "planning":
        return await _planning(step)
    if state.phase == "executing":
        return await _executing(step)
    return await _finishing(step)


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


async def _planning(step: Step) -> StepRecord:
    run = step.run
    state = run.state
    key = PLAN
    visible = await step.shown_tools(key)
    reply = await step.propose(
        frozenset({"plan"}), lambda _: plan_schema(visible, run.settings.max_plan_steps), key
    )
    p = reply.proposal
    if (
        reply.halt is not None
        or run.control.protocol is Protocol.MANUAL_HANDOVER
        or p.kind != "plan"
    ):
        if p.kind not in ("plan", "invalid") and reply.halt is None:
            wrong = f"phase planning expects a plan, not a {p.kind}"
            reply = ModelReply(
                Proposal("invalid", errors=(wrong,)),
                reply.usage,
                reply.settings,
                None,
                reply.strict,
            )
        return await step.finish(reply, key, "planning")
    errors = run.validator.plan_errors(p.plan, run.settings.max_plan_steps)
    if errors:
        return await step.close(await step.refuse(reply, key, errors, "planning", None))
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
    return await step.close(step.accepted(reply, key, "planning", note))


async def _executing(step: Step) -> StepRecord:
    run = step.run
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
        reply = ModelReply(Proposal("invalid"), NO_USAGE, await step.settings(PLAN))
        note = f"dimension reduction: skipped non-core plan step {index} ({plan_step.tool})"
        return await step.close(step.accepted(reply, PLAN, "executing", note))
    if reviewing:
        key = propose_key("executor")
        visible = await step.shown_tools(key)
        hint = (
            f"Execute plan step {index}: {plan_step.goal or plan_step.tool}. Planned call: "
            f"{plan_step.tool}({plan_step.arguments})."
        )
        reply = await step.propose(
            frozenset({"tool"}),
            lambda strict: action_schema(
                visible, (), strict=strict, allow_final=False, **step.bounds()
            ),
            key,
            (hint,),
        )
    else:
        key = PLAN
        if state.pending is not None:  # the frozen plan step, as a human decided it
            reply = await step.propose(frozenset({"tool"}), lambda _: {}, key)
        else:  # the plan's own call: code acts it out, the model is not asked
            call = ActionCall(tool=plan_step.tool, arguments=plan_step.arguments)
            reply = ModelReply(Proposal("tool", call=call), NO_USAGE, await step.settings(key))
    return await step.finish(reply, key, "executing", judge)


async def _finishing(step: Step) -> StepRecord:
    key = propose_key("finishing")
    required = step.run.task.required_fields
    reply = await step.propose(
        frozenset({"final"}),
        lambda strict: action_schema(
            (), required, strict=strict, allow_tool=False, **step.bounds()
        ),
        key,
    )

    async def judge(
        _action: ActionCall | None, _observation: Observation | None
    ) -> tuple[list[str], HaltReason | None]:
        return await _replan(step.run, "the final answer was refused")

    return await step.finish(reply, key, "finishing", judge)
