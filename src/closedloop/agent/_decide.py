"""The decide stage: what the step does with its proposal, before anything runs.

In this order: a proposal cut off by a watcher halts the run; a step its mode settled in
code is settled; the ``manual_handover`` protocol, or an early handover (``_early.py``),
hands the task to a human; a reply the validator refuses (its kind in this phase, its
schema, a plan's steps) is refused, and nothing runs; a final answer goes to the
completion check; before any tool has run, a call whose first sample's confidence is
below ``Sampling.abstain_below`` is not run and the run abstains; a tool call that dimension reduction leaves out is skipped; the same
call again is a repeat (or, with ``end_on_repeat``, the end of the run on its earlier
result); any other call runs. The repeat guard's signature is the one edit a decision
makes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..control import Protocol as DefenceProtocol
from ._early import early_handover
from ._escalation import sample_confidence
from ._fold import Edit, Signed
from ._propose import validate
from ._records import HaltReason
from ._repeats import action_signature, count_repeats, repeated_success
from ._state import PlanStep
from ._tools import Tool
from ._view import ModelReply, View

if TYPE_CHECKING:
    from ._records import ActionCall
    from ._run import Run

__all__ = [
    "Abstain",
    "Answer",
    "Call",
    "CloseOnRepeat",
    "Cut",
    "Decided",
    "Decision",
    "HandOver",
    "Refuse",
    "Repeat",
    "Settle",
    "Skip",
    "decide",
]


@dataclass(frozen=True, slots=True)
class Cut:
    """The proposal was cut off (deadline, budget, cancellation): the run halts."""

    halt: HaltReason


@dataclass(frozen=True, slots=True)
class Abstain:
    """Too unsure to run the first call: the run answers that no offered tool fits."""

    answer: str
    note: str


@dataclass(frozen=True, slots=True)
class Settle:
    """Settled in code, with no action: a plan accepted, a plan step skipped."""

    note: str
    plan: tuple[PlanStep, ...] | None = None


@dataclass(frozen=True, slots=True)
class HandOver:
    """A human decides: the task freezes with the proposed action."""

    reason: str


@dataclass(frozen=True, slots=True)
class Refuse:
    """Refused before anything runs; the reasons are the model's next observation."""

    errors: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Answer:
    """A final answer, accepted only when every required field is filled and valid."""


@dataclass(frozen=True, slots=True)
class Skip:
    """Dimension reduction leaves the tool out: nothing runs, no error."""

    note: str


@dataclass(frozen=True, slots=True)
class Repeat:
    """The same call again: it is not run again."""

    repeats: int


@dataclass(frozen=True, slots=True)
class CloseOnRepeat:
    """The call that last ran and succeeded, proposed again: the run ends on its result."""

    earlier: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Call:
    """Run the tool."""

    tool: Tool
    call: ActionCall


Decision = (
    Cut | Settle | HandOver | Refuse | Answer | Abstain | Skip | Repeat | CloseOnRepeat | Call
)


@dataclass(frozen=True, slots=True)
class Decided:
    """The decision, the edits it made (the repeat guard's) and what the loop did on its
    estimates to reach it (an early handover)."""

    decision: Decision
    edits: tuple[Edit, ...] = ()
    acted: tuple[str, ...] = ()


async def decide(run: Run, view: View, reply: ModelReply) -> Decided:
    """What this step does with ``reply`` (see the module for the order)."""
    p = reply.proposal
    if reply.halt is not None:
        return Decided(Cut(reply.halt))
    if view.ask.settled is not None:
        return Decided(Settle(view.ask.settled))
    if run.control.protocol is DefenceProtocol.MANUAL_HANDOVER:
        return Decided(HandOver(f"f_est {run.control.f_est:.2f} reached the manual-handover level"))
    if (early := early_handover(run, p.call)) is not None:
        return Decided(HandOver(early), acted=(early,))
    if p.kind == "plan" and "plan" in view.ask.kinds:
        return Decided(_plan(run, p.plan))
    errors = validate(run, view.phase, p)
    if errors:
        return Decided(Refuse(tuple(errors)))
    if p.kind == "final":
        return Decided(Answer())
    if (unsure := abstention(run, reply)) is not None:
        return Decided(unsure)
    return _call(run, view, reply)


def abstention(run: Run, reply: ModelReply) -> Abstain | HandOver | None:
    """Abstain rather than run the task's first call when its first sample's
    decision-token probability is below ``Sampling.abstain_below`` (no reading, no
    abstention), or hand the task over with that call (``Sampling.unsure``)."""
    sampling = run.settings.control.sampling
    p = sample_confidence(reply.confidence)
    if p is None or not sampling.abstains(p, reply.proposal.kind, bool(run.state.observations)):
        return None
    below = f"the first call's confidence {p:.2f} is below {sampling.abstain_below:g}"
    if sampling.unsure == "handover":
        return HandOver(f"unsure: {below}")
    return Abstain(sampling.abstain_answer, f"abstained: {below}")


def _plan(run: Run, plan: tuple[Any, ...]) -> Decision:
    errors = run.validator.plan_errors(plan, run.settings.max_plan_steps)
    if errors:
        return Refuse(tuple(errors))
    steps = tuple(
        PlanStep(
            tool=str(s["tool"]),
            arguments=dict(s.get("arguments") or {}),
            goal=str(s.get("goal", "")),
            core=bool(s.get("core", True)) and run.settings.tools[str(s["tool"])].core,
        )
        for s in plan
    )
    version = run.state.plan_version + 1
    return Settle(f"plan v{version} accepted: {len(steps)} step(s)", steps)


def _call(run: Run, view: View, reply: ModelReply) -> Decided:
    state, call = run.state, reply.proposal.call
    assert call is not None
    errors = run.validator.call_errors(call, phase=view.phase, latest=state.latest())
    if errors:
        return Decided(Refuse(tuple(errors)))
    tool = run.settings.tools[call.tool]
    if run.control.protocol is DefenceProtocol.DIMENSION_REDUCTION and not tool.core:
        return Decided(Skip(f"dimension reduction: {tool.name} is not a core step and was skipped"))
    signature = action_signature(call.tool, call.arguments)
    repeats = count_repeats(signature, state.signatures, run.settings.repeat_window)
    latest = state.observations[-1] if state.observations else None
    if repeats and run.tool_io.allows_repeat(tool, signature, latest):
        repeats = 0  # asking again after a passing fault is a retry, not a loop
    if repeats and view.ask.judge is None:
        earlier = _repeated_success(run, signature)
        if earlier is not None:
            return Decided(CloseOnRepeat(earlier), (Signed(signature, 0),))
    if repeats:
        return Decided(Repeat(repeats), (Signed(signature, repeats),))
    return Decided(Call(tool, call), (Signed(signature, 0),))


def _repeated_success(run: Run, signature: str) -> Mapping[str, Any] | None:
    # ``ControlConfig.end_on_repeat``, for a task without required fields only.
    if not run.settings.control.end_on_repeat or run.task.required_fields:
        return None
    return repeated_success(signature, run.state.observations)
