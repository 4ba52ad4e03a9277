"""Spending only when unsure, in the step: adaptive votes, the cascade, the risk feedback.

Three mechanics of :class:`~closedloop.agent.Sampling`, each before anything executes:

- ``draw_until`` draws a proposal's samples one at a time until a stop rule says more
  would not change the vote (Adaptive-Consistency, Aggarwal et al. 2023; ESC, Li et al.
  2024), with the seeds and temperatures the all-at-once draw uses, so a rule that never
  stops early draws exactly the same samples.
- ``climb`` sends a proposal whose confidence is below the threshold to the next rung of
  the model ladder (the Mixture-of-Thoughts cascade, Yue et al. 2024); only the last
  rung's proposal is returned, so an escalated call never runs.
- ``feed`` turns a run's outcome into one update of the conformal PID threshold
  (Angelopoulos, Candes and Tibshirani 2023) per call the run accepted, kept in the store.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Protocol, TypeVar

from .._exceptions import ConfigurationError
from ..control import ActuatorSettings, ConformalPID, StopRule
from ..decision import escalate
from ..feedback import StateStore, ThresholdStates
from ..models import Confidence
from ._actions import Proposal, parse_proposal
from ._model_port import ModelCall, new_usage
from ._protocols import proposal_key
from ._records import HaltReason, RungUsage, RunUsageSummary, StepRecord
from ._run import Run
from ._sampling import RiskControl, Sampling

__all__ = ["climb", "draw_until", "feed", "reply_score", "sample_confidence"]

_SEED_STRIDE = 7919  # the all-at-once draw's seed step between samples (ModelPort.sample)


def sample_confidence(confidence: Confidence | None) -> float | None:
    """One sample's confidence as a probability: exp of the low (10th percentile)
    decision-token log-probability (Gupta et al., ICLR 2024); None without logprobs."""
    if confidence is None or confidence.logprob_low is None:
        return None
    return math.exp(confidence.logprob_low)


def reply_score(proposal: Proposal, confidence: Confidence | None) -> float | None:
    """The confidence a cascade reads on a proposal: 0 for no valid call, the agreement
    of its samples when there are several, else its single sample's confidence."""
    if proposal.kind == "invalid":
        return 0.0
    if confidence is None:
        return None
    if confidence.samples > 1 and confidence.agreement is not None:
        return confidence.agreement
    return sample_confidence(confidence)


async def draw_until(
    run: Run,
    messages: Sequence[Mapping[str, str]],
    *,
    schema: Mapping[str, Any] | None,
    tools: Sequence[Mapping[str, Any]] | None,
    settings: ActuatorSettings,
    rule: StopRule,
) -> tuple[list[ModelCall], RunUsageSummary]:
    """A proposal's samples on the rung ``settings.rung``, drawn one at a time until
    ``rule`` stops (at most its ``max_samples``), a call halts the run or a call fails."""
    cfg, port = run.settings, run.model_io
    ladder = port.ladder()
    index = ladder.index(settings.rung)
    rung = ladder.rungs[index]
    seed = cfg.seed + run.state.step  # the step's index: the state is folded after the step
    usage = new_usage()
    calls: list[ModelCall] = []
    keys: list[str | None] = []
    confidences: list[float | None] = []
    started = cfg.clock()
    for i in range(rule.max_samples):
        call = await port.complete(
            rung.model,
            messages,
            usage,
            schema=schema,
            tools=tools,
            seed=seed + _SEED_STRIDE * i,
            temperature=cfg.temperature if i == 0 else cfg.dual_temperature,
            price=rung,
        )
        calls.append(call)
        if call.completion is None:  # a halt or a failed call: the vote cannot go on
            break
        proposal = parse_proposal(call.completion, native=cfg.native)
        keys.append(None if proposal.kind == "invalid" else proposal_key(proposal))
        confidences.append(sample_confidence(call.completion.confidence))
        if rule.should_stop(keys, confidences) or _will_abstain(run, proposal, confidences):
            break
    spent = RungUsage(
        rung=index,
        model=rung.name,
        model_calls=int(usage["model_calls"]),
        prompt_tokens=int(usage["prompt_tokens"]),
        completion_tokens=int(usage["completion_tokens"]),
        seconds=max(0.0, cfg.clock() - started),
        cost=usage["cost"],
    )
    summary = RunUsageSummary(
        model_calls=spent.model_calls,
        prompt_tokens=spent.prompt_tokens,
        completion_tokens=spent.completion_tokens,
        cost=spent.cost,
        rungs=[spent],
    )
    return calls, summary


def _will_abstain(run: Run, first: Proposal, confidences: Sequence[float | None]) -> bool:
    # A first sample the step will abstain on needs no more samples to vote with.
    sampling = run.settings.control.sampling
    acted = bool(run.state.observations)
    return len(confidences) == 1 and sampling.abstains(confidences[0], first.kind, acted)


class _Reply(Protocol):
    """What ``climb`` reads on a step's reply (the step's ``ModelReply``)."""

    @property
    def proposal(self) -> Proposal: ...
    @property
    def confidence(self) -> Confidence | None: ...
    @property
    def settings(self) -> ActuatorSettings: ...
    @property
    def usage(self) -> RunUsageSummary: ...
    @property
    def halt(self) -> HaltReason | None: ...


R = TypeVar("R", bound=_Reply)
Ask = Callable[[ActuatorSettings], Awaitable[tuple[R, str]]]


def risk_key(run: Run, risk: RiskControl, proposal: Proposal) -> str:
    """Where a proposal's threshold is kept: ``<scope>/<tool>`` (the kind for no call)."""
    scope = risk.scope or run.model_io.ladder().rungs[0].name
    what = proposal.call.tool if proposal.kind == "tool" and proposal.call else proposal.kind
    return f"{scope}/{what}"


def restore(risk: RiskControl, state: Mapping[str, Any] | None) -> ConformalPID:
    """The controller a stored state describes, or a fresh one where there is none, where
    it is unreadable, or where it was made with other settings than ``risk``'s."""
    fresh = risk.controller()
    if state is None:
        return fresh
    try:
        stored = ConformalPID.from_state(state)
    except ConfigurationError:
        return fresh  # a damaged record must not end runs; the next feedback rewrites it
    settings = ("alpha", "kp", "ki", "kd", "start", "lower", "upper")
    same = all(stored.state()[k] == fresh.state()[k] for k in settings)
    return stored if same else fresh


async def threshold(run: Run, sampling: Sampling, proposal: Proposal) -> tuple[float, str | None]:
    """The acceptance threshold for ``proposal`` now, and the key its state is kept by."""
    risk = sampling.risk
    if risk is None:
        assert sampling.escalate_below is not None  # a cascade has one or the other
        return sampling.escalate_below, None
    key = risk_key(run, risk, proposal)
    state = await ThresholdStates(run.store, risk.namespace).get(key)
    return restore(risk, state).threshold, key


async def climb(
    run: Run, reply: R, text: str, ask: Ask[R]
) -> tuple[R, str, RunUsageSummary, dict[str, Any]]:
    """Escalate ``reply`` up the model ladder while its confidence is below the threshold;
    the last rung's reply runs whatever its confidence. Returns that reply, its text, the
    usage of every rung asked, and what the trace keeps: each rung's score and threshold,
    and whether the first rung's call was accepted (so that it counts for the risk
    controller)."""
    sampling = run.settings.control.sampling
    ladder = run.model_io.ladder()
    index = ladder.index(reply.settings.rung)
    trail: list[dict[str, Any]] = []
    key: str | None = None
    spent = [reply.usage]
    while True:
        score = reply_score(reply.proposal, reply.confidence)
        tau, key = await threshold(run, sampling, reply.proposal)
        trail.append({"rung": index, "model": ladder.rungs[index].name, "score": score})
        trail[-1]["threshold"] = tau
        if reply.halt is not None or index >= ladder.top or not escalate(score, tau):
            break
        index += 1
        reply, text = await ask(replace(reply.settings, rung=index))
        spent.append(reply.usage)
    first = trail[0]
    accepted = len(trail) == 1 and first["score"] is not None and first["score"] >= tau
    record = {"rungs": trail, "escalations": len(trail) - 1, "accepted": accepted, "key": key}
    return reply, text, RunUsageSummary.total(spent), record


async def feed(
    store: StateStore, risk: RiskControl, steps: Sequence[StepRecord], ok: bool
) -> dict[str, float]:
    """One outcome for every call the run accepted on its first rung (``err`` = not
    ``ok``), each folded into its threshold's stored state; returns the new thresholds
    by key. Steps with no accepted call (escalated, or no cascade) change nothing."""
    if not isinstance(ok, bool):
        raise ConfigurationError("ok", ok, "must be a bool (True: the run's answer was right)")
    states = ThresholdStates(store, risk.namespace)
    out: dict[str, float] = {}
    for step in steps:
        record = step.actuators.get("sampling")
        if not isinstance(record, Mapping) or not record.get("accepted"):
            continue
        key = record.get("key")
        if not isinstance(key, str):
            continue

        def fold(current: dict[str, Any] | None) -> dict[str, Any]:
            pid = restore(risk, current)
            pid.update(not ok)
            return pid.state()

        out[key] = float((await states.update(key, fold))["threshold"])
    return out
