"""Rules first: the decision layer's advice on a failed read, and the gate that lets a
rule make the next call itself.

After a tool's poor answer, :func:`advise` asks the rules (``decision.default_rules``)
for a known cause (empty, 429, 5xx, timeout, stale); their advice reaches the model as a
note, and travels to the next step in its :class:`~closedloop.agent._view.Carry`. There,
with a :class:`~closedloop.decision.RuleGate`, :func:`ruled` lets the rule repeat the
call without asking the model when the rule's confidence clears the gate at the tool's
recent error (read from the errors handed forward with u).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..perception import Observation, ObservationStatus
from ._actions import Proposal
from ._actuators import act_key
from ._inflight import race
from ._records import ActionCall, HaltReason, RunUsageSummary
from ._repeats import action_signature
from ._state import ObservationEntry
from ._view import ModelReply, RuleAdvice, View

if TYPE_CHECKING:
    from ._run import Run

__all__ = [
    "Ruled",
    "advise",
    "ruled",
]


@dataclass(frozen=True, slots=True)
class Ruled:
    """The gate's answer: the rule's call (None: the model decides) and, when the gate
    looked and said no, why."""

    reply: ModelReply | None = None
    note: str | None = None


async def advise(
    run: Run,
    observation: Observation,
    call: ActionCall,
    earlier: list[ObservationEntry],
    *,
    step: int,
    attempts: int,
) -> tuple[str | None, RuleAdvice | None]:
    """The decision layer's rule for a known cause of a poor answer: its note for the
    model, and (for a rule gate) the advice for the next step. ``earlier`` are the kept
    observations before this one."""
    if observation.status is ObservationStatus.OK:
        run.rules.forget(observation.source)
        return None, None
    widened = any(
        e.tool == observation.source and e.observation.get("status") == "empty" for e in earlier
    )
    decision = await run.rules.decide([observation], {"query_widened": widened})
    if decision.rule is None:
        return None, None
    note = f"rule {decision.rule} -> {decision.action}: {decision.reason}"
    return note, RuleAdvice(decision, call, step, attempts)


async def ruled(run: Run, view: View) -> Ruled:
    """The last failed read made again by its rule, with no model call, when the rule's
    confidence clears the gate at that tool's recent error; else the model decides."""
    gate = run.settings.control.rule_gate
    advice = view.carry.advice
    if gate is None or advice is None or "tool" not in view.ask.kinds:
        return Ruled()
    decision, call = advice.decision, advice.call
    tool = run.settings.tools.get(call.tool)
    if tool is None or decision.action not in gate.actions:
        return Ruled()
    latest = run.state.observations[-1] if run.state.observations else None
    if not run.tool_io.may_repeat(tool, action_signature(call.tool, call.arguments), latest):
        return Ruled()  # the repeat budget after a fault is spent: the model decides
    key = act_key(tool.name)
    # The rule's call is an attempt of the same read, not a fresh budget: it runs only
    # while the most attempts the schedule ever gives a call are not used up.
    used = advice.attempts if advice.step == view.step - 1 else 1
    left = 1 + run.settings.control.schedule.max_retries(1.0) - used
    if left < 1:
        return Ruled()
    # The error before this failure: a lone fault after calm steps (or none) meets a
    # low gate; a fault that persists has raised it by the time it fails again.
    errors = view.carry.actuators.errors.get(key, ())[-gate.window - 1 : -1]
    recent = sum(errors) / len(errors) if errors else 0.0
    threshold = gate.threshold(recent)
    head = f"rule {decision.rule} -> {decision.action} (confidence {decision.confidence:.2f}"
    if decision.confidence < threshold:
        why = f"{head} < gate {threshold:.2f} at recent error {recent:.2f}): the model decides"
        return Ruled(note=why)
    wait, factor = 0.0, 1.0
    if decision.action == "back_off":
        wait = float(decision.params.get("delay_s", 0.0))
    elif decision.action == "retry_later":
        act = await run.controllers.settings(view.carry.actuators, key)
        wait = act.retry_delay_ms / 1000.0
    elif decision.action == "widen_timeout":
        factor = float(decision.params.get("factor", 1.0))
    wait = min(max(0.0, wait), gate.max_wait_s, max(0.0, run.deadline_s - run.elapsed()))
    settings = view.settings
    if wait > 0:
        # Cancellation and the budget may cut the wait; the deadline already bounds it.
        watchers: dict[HaltReason, Callable[[], Any]] = {
            k: w for k, w in run.watchers().items() if k is not HaltReason.DEADLINE
        }
        _, cut = await race(run.settings.sleep(wait), watchers)
        if cut is not None:
            reply = ModelReply(Proposal("tool", call=call), RunUsageSummary(), settings, halt=cut)
            return Ruled(reply)
    note = (
        f"{head} >= gate {threshold:.2f} at recent error {recent:.2f}): {call.tool} is "
        "called again without asking the model" + (f", after {wait:g} s" if wait > 0 else "")
    )
    proposal = Proposal("tool", call=call, notes=(note,))
    reply = ModelReply(
        proposal,
        RunUsageSummary(),
        settings,
        level="rule",
        ruled_by=decision.rule,
        timeout_factor=factor,
        retry_cap=left - 1,
    )
    return Ruled(reply)
