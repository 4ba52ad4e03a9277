"""The hybrid controller: maintain inside the tolerance, rules for known causes, model last.

Rules first, the model past a gate: aggregate the latest observations into a state
vector, compute a weighted error, and route. Inside the tolerance nothing is done. Outside
it, registered rules for the causes at hand propose moves; the best proposal wins unless
its confidence is below the gate, and only then is the model (an injected async callable)
asked.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from types import MappingProxyType
from typing import Any, TypeAlias

from pydantic import BaseModel, ConfigDict, Field

from .._exceptions import ConfigurationError
from .._validation import (
    require_finite,
    require_int_at_least,
    require_non_negative,
    require_unit_interval,
)
from ..perception import Observation, ObservationStatus
from ._context import DecisionContext, Proposal, SourceState, StateVector, Trigger
from ._rules import OUT_OF_TOLERANCE, RuleRegistry, default_causes

__all__ = [
    "Decision",
    "DecisionLog",
    "HybridController",
    "ModelPolicy",
    "Threshold",
]

ModelPolicy: TypeAlias = Callable[[DecisionContext], Awaitable[Proposal]]
"""The model's turn: reads the context (rule proposals included), returns a proposal."""

Threshold: TypeAlias = float | Callable[[DecisionContext], float]
"""A fixed number, or a function of the context (e.g. ``max(50, 0.1 * budget)``)."""

ErrorFn: TypeAlias = Callable[[StateVector, Mapping[str, Any]], float]
Classifier: TypeAlias = Callable[[Observation], Iterable[str]]

# Actions the controller itself may return (the rest come from rules and the model).
MAINTAIN = "maintain"
ESCALATE = "escalate"


class Decision(BaseModel):
    """One routed decision, as recorded in the decision log and the trace."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    action: str
    reason: str
    rule: str | None
    confidence: float = Field(ge=0.0, le=1.0)
    error: float
    used_model: bool
    tolerance: float
    params: dict[str, Any] = Field(default_factory=dict)
    timestamp: float


class DecisionLog:
    """The last ``maxlen`` decisions, oldest first."""

    def __init__(self, maxlen: int = 1000) -> None:
        self._entries: deque[Decision] = deque(maxlen=require_int_at_least("maxlen", maxlen, 1))

    def append(self, decision: Decision) -> None:
        """Add one decision at the end of the log."""
        self._entries.append(decision)

    @property
    def entries(self) -> tuple[Decision, ...]:
        return tuple(self._entries)

    def reasons(self) -> list[str]:
        """Each decision's reason, oldest first."""
        return [d.reason for d in self._entries]

    def to_jsonl(self) -> str:
        """The log as JSON Lines, one decision per line, oldest first."""
        return "".join(d.model_dump_json() + "\n" for d in self._entries)

    def __iter__(self) -> Iterator[Decision]:
        return iter(tuple(self._entries))

    def __len__(self) -> int:
        return len(self._entries)


class HybridController:
    """Rules first, the model past a gate, every decision logged with its reason.

    ``weights`` maps sources to their weight in the error (others get ``default_weight``).
    ``tolerance`` and ``gate`` are numbers or functions of the :class:`DecisionContext`.
    ``error_fn(state, context)`` replaces the default error, ``1 - weighted confidence``,
    for loops that measure something else (a price above budget, in currency units).
    ``clock`` gives the observation ages; pass ``now`` to :meth:`decide` to bypass it.
    """

    def __init__(
        self,
        rules: RuleRegistry | None = None,
        *,
        model: ModelPolicy | None = None,
        weights: Mapping[str, float] | None = None,
        default_weight: float = 1.0,
        tolerance: Threshold = 0.2,
        gate: Threshold = 0.3,
        error_fn: ErrorFn | None = None,
        classify: Classifier = default_causes,
        clock: Callable[[], float] = time.time,
        log: DecisionLog | None = None,
    ) -> None:
        if rules is not None and not isinstance(rules, RuleRegistry):
            raise ConfigurationError("rules", rules, "must be a RuleRegistry")
        self.rules = rules if rules is not None else RuleRegistry()
        self.model = model
        self.weights = MappingProxyType(
            {
                name: require_non_negative(f"weights[{name!r}]", w)
                for name, w in (weights or {}).items()
            }
        )
        self.default_weight = require_non_negative("default_weight", default_weight)
        self.tolerance = _check_threshold("tolerance", tolerance)
        self.gate = _check_threshold("gate", gate, unit=True)
        self.error_fn = error_fn
        self.classify = classify
        self.clock = clock
        self.log = log if log is not None else DecisionLog()
        self._latest: dict[str, Observation] = {}

    # --- state -----------------------------------------------------------------------------

    def observe(self, *observations: Observation) -> None:
        """Keep the newest observation per source (by timestamp)."""
        for obs in observations:
            if not isinstance(obs, Observation):
                raise ConfigurationError("observation", obs, "must be an Observation")
            current = self._latest.get(obs.source)
            if current is None or obs.timestamp >= current.timestamp:
                self._latest[obs.source] = obs

    def forget(self, source: str) -> None:
        """Drop the latest observation kept for ``source`` (nothing happens if there is none)."""
        self._latest.pop(source, None)

    @property
    def latest(self) -> Mapping[str, Observation]:
        return MappingProxyType(dict(self._latest))

    def state_vector(self, now: float | None = None) -> StateVector:
        """The state vector of the latest observations at ``now``."""
        at = self.clock() if now is None else require_finite("now", now)
        sources = {}
        for name, obs in sorted(self._latest.items()):
            # The age of what we hold: time since it was observed plus how old a cached
            # answer already was when it was served.
            age = max(0.0, at - obs.timestamp) + (obs.age_s or 0.0)
            sources[name] = SourceState(
                source=name,
                confidence=obs.confidence,
                status=obs.status,
                age_s=age,
                weight=self.weights.get(name, self.default_weight),
                retry_after_s=obs.retry_after_s,
                error=obs.error,
                causes=tuple(self.classify(obs)),
            )
        return StateVector(MappingProxyType(sources), at)

    # --- routing ---------------------------------------------------------------------------

    async def decide(
        self,
        observations: Iterable[Observation] = (),
        context: Mapping[str, Any] | None = None,
        *,
        now: float | None = None,
    ) -> Decision:
        """Fold in ``observations`` and route: maintain, a rule, or the model."""
        self.observe(*observations)
        ctx_map = MappingProxyType(dict(context or {}))
        state = self.state_vector(now)
        error = (
            state.confidence_error()
            if self.error_fn is None
            else require_finite("error_fn()", self.error_fn(state, ctx_map))
        )
        ctx = DecisionContext(state, self.latest, ctx_map, error, 0.0)
        tolerance = self._resolve("tolerance", self.tolerance, ctx)
        ctx = DecisionContext(state, self.latest, ctx_map, error, tolerance)
        if error <= tolerance:
            return self._record(
                MAINTAIN,
                f"error {error:.3g} is within tolerance {tolerance:.3g}",
                None,
                1.0,
                ctx,
                False,
            )
        proposals = self._consult_rules(ctx)
        ctx = DecisionContext(state, self.latest, ctx_map, error, tolerance, proposals)
        gate = self._resolve("gate", self.gate, ctx)
        best = proposals[0] if proposals else None
        head = f"error {error:.3g} > tolerance {tolerance:.3g}"
        if best is not None and best[1].confidence >= gate:
            rule, proposal = best
            return self._record(
                proposal.action,
                f"{head}; rule {rule} (confidence {proposal.confidence:.2f} >= gate "
                f"{gate:.2f}): {proposal.reason}",
                rule,
                proposal.confidence,
                ctx,
                False,
                proposal.params,
            )
        why_model = (
            f"best rule {best[0]} has confidence {best[1].confidence:.2f} < gate {gate:.2f}"
            if best is not None
            else "no rule knows this cause"
        )
        if self.model is None:
            return self._fallback(ctx, best, f"{head}; {why_model}; no model configured")
        try:
            proposal = await self.model(ctx)
        except Exception as exc:
            if isinstance(exc, ConfigurationError | TypeError | AttributeError):
                raise
            return self._fallback(
                ctx, best, f"{head}; {why_model}; the model failed ({type(exc).__name__}: {exc})"
            )
        if not isinstance(proposal, Proposal):
            raise ConfigurationError("model", proposal, "the model policy must return a Proposal")
        return self._record(
            proposal.action,
            f"{head}; {why_model}; model: {proposal.reason}",
            None,
            proposal.confidence,
            ctx,
            True,
            proposal.params,
        )

    def _consult_rules(self, ctx: DecisionContext) -> tuple[tuple[str, Proposal], ...]:
        """Every applicable rule's proposal, best first.

        Triggers are ordered by the source's share of the error, so on a confidence and
        priority tie the rule for the worst source wins.
        """
        sources = sorted(ctx.state.sources.values(), key=lambda s: -s.error_share)
        triggers = [
            Trigger(cause, s)
            for s in sources
            if s.status is not ObservationStatus.OK
            for cause in s.causes
        ]
        triggers.append(Trigger(OUT_OF_TOLERANCE, None))
        ranked: list[tuple[float, int, int, str, Proposal]] = []
        seen: set[str] = set()
        order = 0
        for trigger in triggers:
            for rule in self.rules.for_cause(trigger.cause):
                proposal = rule(ctx, trigger)
                if proposal is None:
                    continue
                if not isinstance(proposal, Proposal):
                    raise ConfigurationError(
                        f"rule {rule.name!r}", proposal, "must return a Proposal or None"
                    )
                tag = f"{rule.name}:{trigger.source.source if trigger.source else '*'}"
                if tag in seen:
                    continue
                seen.add(tag)
                ranked.append((-proposal.confidence, -rule.priority, order, rule.name, proposal))
                order += 1
        ranked.sort(key=lambda item: item[:3])
        return tuple((name, proposal) for *_, name, proposal in ranked)

    def _fallback(
        self, ctx: DecisionContext, best: tuple[str, Proposal] | None, reason: str
    ) -> Decision:
        # Without a usable model a weak rule still beats doing nothing; with no rule either,
        # the only safe move is to hand the decision to a human.
        if best is not None:
            rule, proposal = best
            return self._record(
                proposal.action,
                f"{reason}; falling back to rule {rule}: {proposal.reason}",
                rule,
                proposal.confidence,
                ctx,
                False,
                proposal.params,
            )
        return self._record(ESCALATE, f"{reason}; escalating", None, 0.0, ctx, False)

    def _record(
        self,
        action: str,
        reason: str,
        rule: str | None,
        confidence: float,
        ctx: DecisionContext,
        used_model: bool,
        params: Mapping[str, Any] | None = None,
    ) -> Decision:
        decision = Decision(
            action=action,
            reason=reason,
            rule=rule,
            confidence=confidence,
            error=ctx.error,
            used_model=used_model,
            tolerance=ctx.tolerance,
            params=dict(params or {}),
            timestamp=ctx.state.now,
        )
        self.log.append(decision)
        return decision

    @staticmethod
    def _resolve(name: str, threshold: Threshold, ctx: DecisionContext) -> float:
        value = threshold(ctx) if callable(threshold) else threshold
        return require_finite(name, value)


def _check_threshold(name: str, value: Threshold, *, unit: bool = False) -> Threshold:
    if callable(value):
        return value
    return require_unit_interval(name, value) if unit else require_non_negative(name, value)
