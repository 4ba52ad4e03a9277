"""How a step's samples are drawn and when it climbs the model ladder, as one option group.

Spending only when unsure: a stop rule ends a vote once more samples would not change it
(Adaptive-Consistency, Aggarwal et al. 2023; ESC, Li et al. 2024); a cascade sends the
proposal to the next rung of the model ladder before anything executes when the rung's
own signal is below a threshold (the Mixture-of-Thoughts cascade, Yue et al. 2024); and a
risk controller sets that threshold online from the outcomes of accepted calls (conformal
PID control, Angelopoulos, Candes and Tibshirani 2023).

All of it is off by default: the votes the schedule asks for, on the scheduled rung.
``Sampling(stop="auto")`` names the confident call: with a model that gives
decision-token logprobs, a first sample read at 0.5 or more runs at once and a less
confident one becomes a confidence-weighted vote of up to three; with one that gives
none, the scheduled votes. It is not the default: in the multi-step agent it spent 1.6
times the model calls for a gain its live check could not separate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .._exceptions import ConfigurationError
from .._validation import require_unit_interval
from ..control import ConfidenceStop, ConformalPID, StopRule
from ..feedback import THRESHOLD_NAMESPACE

__all__ = ["ABSTAIN_ANSWER", "CONFIDENT_CALL", "RiskControl", "Sampling"]

ABSTAIN_ANSWER = "None of the offered tools fits this request, so no tool was called."
"""What an abstaining run answers (``Sampling.abstain_answer``)."""

CONFIDENT_CALL = ConfidenceStop(threshold=0.5, max_samples=3, when_unknown="stop")
"""The stop rule of ``Sampling(stop="auto")`` where the model gives logprobs: a
first sample whose decision-token probability is 0.5 or more runs alone, else up to three
samples vote, weighted by their confidence. A sample that comes back with no logprobs
runs alone, as it would with no rule. 0.5 and three samples are what the development
banks of both embedded models pick on the tool-calling benchmark."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RiskControl:
    """The acceptance threshold set online to hold the error of accepted calls at
    ``alpha`` (:class:`~closedloop.control.ConformalPID` with these gains, from ``start``,
    kept within ``limits``).

    Its state is kept per ``scope`` and tool in the store under ``namespace``, so it
    carries across runs, sessions and workers; ``scope`` defaults to the name of the
    ladder's cheapest model. Outcomes come in through ``Agent.feedback``. The upper limit
    stays below 1 so that some calls are still accepted, and so still give feedback.
    """

    alpha: float = 0.1
    kp: float = 0.0
    ki: float = 0.05
    kd: float = 0.0
    start: float = 0.5
    limits: tuple[float, float] = (0.0, 0.99)
    namespace: str = THRESHOLD_NAMESPACE
    scope: str | None = None

    def __post_init__(self) -> None:
        self.controller()  # every gain and limit checked now, named if wrong
        if not isinstance(self.namespace, str) or not self.namespace:
            raise ConfigurationError("namespace", self.namespace, "must be a non-empty string")
        if self.scope is not None and (not isinstance(self.scope, str) or not self.scope):
            raise ConfigurationError("scope", self.scope, "must be a non-empty string or None")

    def controller(self) -> ConformalPID:
        """A fresh controller with these settings."""
        return ConformalPID(
            self.alpha, self.kp, self.ki, self.kd, start=self.start, limits=self.limits
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Sampling:
    """How a step's proposal is sampled and escalated before anything executes.

    ``stop``: a stop rule (:class:`~closedloop.control.BetaStop`, ``WindowStop``,
    ``ConfidenceStop``, ``FixedVotes``); samples are then drawn one at a time until it
    stops, at most its ``max_samples``, in place of the votes the schedule asks for (not
    under dual verification, which keeps its pair). None, the default: the scheduled
    votes, all at once. ``"auto"``, the confident call: ``ConfidenceStop(threshold=0.5,
    max_samples=3, when_unknown="stop")`` where the agent asks its model for logprobs
    (``ModelSettings.logprobs``), else None; :meth:`rule` says which.

    ``escalate_below``: with a model ladder, a proposal whose confidence (the agreement of
    its samples, or a single sample's decision-token probability) is below this goes to the
    next rung before it runs, and so on up the ladder; the top rung's proposal runs
    whatever its confidence. ``risk`` sets that threshold online instead
    (:class:`RiskControl`). Both None, the default: no cascade.

    ``abstain_below``: before any tool has run, a proposed call whose first sample's
    decision-token probability (``exp(logprob_low)``) is below this is not run: the run ends
    ``abstained``, answering ``abstain_answer`` (selective prediction: decline rather than
    act when unsure, Geifman and El-Yaniv 2017). It needs a model that gives logprobs; with
    none it never abstains. None, the default: never. ``unsure`` says what such a proposal
    does instead: ``"abstain"`` answers as above; ``"handover"`` puts the task on the
    handover queue with the unsure call, for a person to approve, edit or reject (the run
    ends ``handover`` and resumes from their decision).
    """

    stop: StopRule | Literal["auto"] | None = None
    escalate_below: float | None = None
    risk: RiskControl | None = None
    abstain_below: float | None = None
    abstain_answer: str = ABSTAIN_ANSWER
    unsure: Literal["abstain", "handover"] = "abstain"

    def __post_init__(self) -> None:
        if self.stop not in (None, "auto") and not isinstance(self.stop, StopRule):
            raise ConfigurationError(
                "stop", self.stop, "must be a stop rule (should_stop and max_samples), auto or None"
            )
        if self.escalate_below is not None:
            require_unit_interval("escalate_below", self.escalate_below)
        if self.risk is not None and not isinstance(self.risk, RiskControl):
            raise ConfigurationError("risk", self.risk, "must be a RiskControl or None")
        if self.abstain_below is not None:
            require_unit_interval("abstain_below", self.abstain_below)
        if self.unsure not in ("abstain", "handover"):
            raise ConfigurationError("unsure", self.unsure, "must be 'abstain' or 'handover'")
        if not isinstance(self.abstain_answer, str) or not self.abstain_answer.strip():
            raise ConfigurationError(
                "abstain_answer", self.abstain_answer, "must be a non-empty string"
            )

    def rule(self, logprobs: bool) -> StopRule | None:
        """The stop rule a step draws under: ``stop``, with ``"auto"`` resolved by
        whether the model is asked for ``logprobs``."""
        if self.stop == "auto":
            return CONFIDENT_CALL if logprobs else None
        return self.stop

    def abstains(self, confidence: float | None, kind: str, acted: bool) -> bool:
        """Whether a proposal of ``kind`` whose first sample reads ``confidence`` is
        declined: a tool call, before any tool ran, below ``abstain_below``."""
        floor = self.abstain_below
        if floor is None or confidence is None or acted:
            return False
        return kind == "tool" and confidence < floor

    @property
    def cascades(self) -> bool:
        """Whether a proposal may climb the ladder before it runs."""
        return self.escalate_below is not None or self.risk is not None
