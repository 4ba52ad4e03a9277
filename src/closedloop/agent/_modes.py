"""The three control granularities, as arrangements of the same stages.

``react``: every step the model sees the newest observations and proposes one action.
``plan_execute``: the model writes a structured, validated plan; code runs it step by
step; the model comes back only to replan (counted and bounded) and to answer.
``plan_review``: planner, executor and reviewer; the reviewer (code or a model) checks
each step's completion condition and can send the step back.

A mode only says what each step asks for (an :class:`~closedloop.agent._view.Ask`: the
phase, the proposing key, the kinds of reply and their schema, or a proposal made in
code) and, in the plan modes, how the step's outcome is judged; the driver
(``_driver.py``) runs the same stages for all three. A Lyapunov monitor on task quality
across replans ends a run whose replans keep making things worse.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..control import Protocol as DefenceProtocol
from ..perception import Observation, ObservationStatus
from ._actions import Proposal, action_schema, plan_schema
from ._actuators import PLAN, propose_key
from ._close import completion
from ._fold import Edit, Noted, PlanEdit
from ._propose import answer_open, bounds
from ._records import ActionCall, HaltReason
from ._review import ReviewRequest, ReviewVerdict, review
from ._state import field_problems
from ._view import Ask, Judge, Judged, Mode

if TYPE_CHECKING:
    from ._run import Run

__all__ = ["MODES", "PlanModes", "ReActMode", "mode_for"]

MODES = ("react", "plan_execute", "plan_review")


@dataclass(frozen=True, slots=True)
class ReActMode:
    """Propose, validate, act, observe, measure, control: every step."""

    name: str = "react"

    def ask(self, run: Run) -> Ask:
        incomplete = field_problems(run.task.required_fields, run.state.required_fields)
        required = run.task.required_fields

        def schema(shown: Any, strict: bool) -> Mapping[str, Any]:
            return action_schema(
                shown, required, strict=strict, allow_final=answer_open(run), **bounds(run)
            )

        return Ask(
            phase="collecting" if incomplete else "committing",
            key=propose_key("react"),
            kinds=frozenset({"tool", "final"}),
            schema=schema,
        )


@dataclass(frozen=True, slots=True)
class PlanModes:
    """Plan and execute (``reviewing=False``), or planner / executor / reviewer."""

    name: str
    reviewing: bool

    def ask(self, run: Run) -> Ask:
        state = run.state
        phase = state.phase
        if phase not in ("planning", "executing", "finishing"):
            phase = "planning"
        if phase == "executing" and state.cursor >= len(state.plan):
            phase = "finishing"
        if phase == "planning":
            plan_steps = run.settings.max_plan_steps
            return Ask(
                phase=phase,
                key=PLAN,
                kinds=frozenset({"plan"}),
                schema=lambda shown, _: plan_schema(shown, plan_steps),
            )
        if phase == "executing":
            return self._executing(run)
        return Ask(
            phase=phase,
            key=propose_key("finishing"),
            kinds=frozenset({"final"}),
            schema=lambda _, strict: action_schema(
                (), run.task.required_fields, strict=strict, allow_tool=False, **bounds(run)
            ),
            judge=_refused_answer(run),
        )

    def _executing(self, run: Run) -> Ask:
        state = run.state
        index = state.cursor
        planned = state.plan[index]
        judge = _plan_judge(run, index, self.reviewing)
        if run.control.protocol is DefenceProtocol.DIMENSION_REDUCTION and not planned.core:
            done = _advanced(run, index, "skipped")
            return Ask(
                phase="executing",
                key=PLAN,
                settled=f"dimension reduction: skipped non-core plan step {index} ({planned.tool})",
                edits=(done,),
            )
        if self.reviewing:
            hint = (
                f"Execute plan step {index}: {planned.goal or planned.tool}. Planned call: "
                f"{planned.tool}({planned.arguments})."
            )
            return Ask(
                phase="executing",
                key=propose_key("executor"),
                kinds=frozenset({"tool"}),
                schema=lambda shown, strict: action_schema(
                    shown, (), strict=strict, allow_final=False, **bounds(run)
                ),
                hints=(hint,),
                judge=judge,
            )
        if state.pending is not None:  # the frozen plan step, as a human decided it
            return Ask(phase="executing", key=PLAN, kinds=frozenset({"tool"}), judge=judge)
        # the plan's own call: code acts it out, the model is not asked
        call = ActionCall(tool=planned.tool, arguments=planned.arguments)
        made = Proposal("tool", call=call)
        return Ask(phase="executing", key=PLAN, made=made, judge=judge)


def mode_for(name: str) -> Mode:
    """The arrangement of the stages a mode's name stands for."""
    if name == "react":
        return ReActMode()
    return PlanModes(name, reviewing=name == "plan_review")


def _advanced(run: Run, index: int, status: str) -> PlanEdit:
    """Plan step ``index`` settled (done or skipped): the cursor moves past it; past the
    last one the plan is carried out and the task goes on to its answer."""
    cursor = index + 1
    finishing = "finishing" if cursor >= len(run.state.plan) else None
    return PlanEdit(index=index, status=status, cursor=cursor, phase=finishing)


def _replan(run: Run, after: Mapping[str, Any], reason: str) -> Judged:
    """The plan failed: its current step is marked, and the task plans again unless the
    replans ran out or task quality fell across them (Lyapunov)."""
    state, cfg = run.state, run.settings
    failed = PlanEdit(index=state.cursor, status="failed", replanned=True)
    count = state.replan_count + 1
    verdict = run.control.observe_replan(completion(run, after["fields"]))
    if count > cfg.max_replans:
        limit = f"replan limit reached ({cfg.max_replans}): {reason}"
        return Judged((limit,), HaltReason.NO_PROGRESS, (failed,))
    if verdict.should_stop:
        fell = "task quality fell across consecutive replans (Lyapunov)"
        return Judged((fell,), HaltReason.NO_PROGRESS, (failed,))
    note = f"replanning (#{count}): {reason}"
    again = PlanEdit(
        index=state.cursor, status="failed", replanned=True, cursor=0, phase="planning"
    )
    return Judged((note,), None, (again, Noted((note,))), phase="planning")


def _plan_judge(run: Run, index: int, reviewing: bool) -> Judge:
    """What a plan step's outcome means for the plan: advance, send back, or replan."""
    planned = run.state.plan[index]

    async def judge(
        action: ActionCall | None, observation: Observation | None, after: Mapping[str, Any]
    ) -> Judged:
        edits: tuple[Edit, ...] = ()
        if observation is None or action is None:
            if not reviewing:
                return _replan(run, after, f"plan step {index} ({planned.tool}) was refused")
        else:
            if reviewing:
                request = ReviewRequest(planned, action, observation, after)
                verdict, edits = await review(run, request)
            else:
                ok = observation.status is ObservationStatus.OK
                verdict = ReviewVerdict(ok, "" if ok else f"answer was {observation.status.value}")
            if verdict.complete:
                done = _advanced(run, index, "done")
                return Judged((f"plan step {index} complete",), None, (*edits, done), done.phase)
            if not reviewing:
                return _replan(run, after, f"plan step {index} failed: {verdict.reason}")
            back = f"the reviewer sent plan step {index} back: {verdict.reason}"
            edits = (*edits, Noted((back,)))
        sendbacks = planned.sendbacks + 1
        edits = (PlanEdit(index=index, sendback=True), *edits)
        if sendbacks > run.settings.max_sendbacks:
            why = f"plan step {index} was sent back {sendbacks} times"
            replanned = _replan(run, after, why)
            return Judged(
                replanned.notes, replanned.halt, (*edits, *replanned.edits), replanned.phase
            )
        return Judged((f"plan step {index} sent back ({sendbacks})",), None, edits)

    return judge


def _refused_answer(run: Run) -> Judge:
    async def judge(
        _action: ActionCall | None, _observation: Observation | None, after: Mapping[str, Any]
    ) -> Judged:
        return _replan(run, after, "the final answer was refused")

    return judge
