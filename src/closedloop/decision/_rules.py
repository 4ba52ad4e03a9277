"""Rules the hybrid controller tries before it asks a model: known causes, known moves.

A rule is registered up front against the causes it handles (an observation status such as
``rate_limited``, an HTTP code such as ``503``, or :data:`OUT_OF_TOLERANCE`); the
controller looks the causes up in the registry, so it holds no if-else chain on error types.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum

from .._exceptions import ConfigurationError
from ..perception import Observation, ObservationStatus
from ._context import DecisionContext, Proposal, Trigger

__all__ = [
    "OUT_OF_TOLERANCE",
    "Rule",
    "RuleFn",
    "RuleRegistry",
    "cause_key",
    "default_causes",
    "default_rules",
]

OUT_OF_TOLERANCE = "out_of_tolerance"
"""The cause present whenever the error is outside the tolerance, whatever the statuses."""

_HTTP_CODE = re.compile(r"\b([45]\d\d)\b")


RuleFn = Callable[[DecisionContext, Trigger], Proposal | None]
"""A rule body: ``None`` when it does not apply to this context."""


@dataclass(frozen=True, slots=True)
class Rule:
    """A named rule for a set of causes; higher ``priority`` wins a confidence tie."""

    name: str
    causes: frozenset[str]
    fn: RuleFn
    priority: int = 0

    def __call__(self, ctx: DecisionContext, trigger: Trigger) -> Proposal | None:
        return self.fn(ctx, trigger)


def cause_key(cause: str | int | Enum) -> str:
    """The registry key of a cause: a status value, ``"http_503"`` for 503, or a string."""
    if isinstance(cause, bool):
        raise ConfigurationError("cause", cause, "must be a status, an HTTP code or a string")
    if isinstance(cause, int):
        if not 100 <= cause <= 599:
            raise ConfigurationError("cause", cause, "an HTTP status code lies in 100..599")
        return f"http_{cause}"
    if isinstance(cause, Enum):
        return str(cause.value)
    if isinstance(cause, str) and cause:
        return cause
    raise ConfigurationError("cause", cause, "must be a status, an HTTP code or a string")


def default_causes(observation: Observation) -> tuple[str, ...]:
    """Cause keys of one observation: the HTTP code named in its error first, then status."""
    keys: list[str] = []
    if observation.error:
        keys.extend(f"http_{code}" for code in _HTTP_CODE.findall(observation.error))
    keys.append(observation.status.value)
    return tuple(dict.fromkeys(keys))


class RuleRegistry:
    """Rules by cause, registered up front with :meth:`on` or :meth:`add`."""

    def __init__(self, rules: Iterable[Rule] = ()) -> None:
        self._rules: list[Rule] = []
        for rule in rules:
            self.add(rule)

    def add(self, rule: Rule) -> Rule:
        """Register ``rule`` (its name must be new) and return it."""
        if not isinstance(rule, Rule):
            raise ConfigurationError("rule", rule, "must be a Rule")
        if any(existing.name == rule.name for existing in self._rules):
            raise ConfigurationError("rule", rule.name, "a rule with this name is registered")
        self._rules.append(rule)
        return rule

    def on(
        self, *causes: str | int | Enum, name: str | None = None, priority: int = 0
    ) -> Callable[[RuleFn], RuleFn]:
        """Decorator: register the function as a rule for ``causes``."""
        if not causes:
            raise ConfigurationError("causes", causes, "name at least one cause")
        keys = frozenset(cause_key(c) for c in causes)

        def register(fn: RuleFn) -> RuleFn:
            label = name if name is not None else str(getattr(fn, "__name__", repr(fn)))
            self.add(Rule(label, keys, fn, priority))
            return fn

        return register

    def for_cause(self, cause: str) -> tuple[Rule, ...]:
        """The rules registered for one cause key, in registration order."""
        return tuple(rule for rule in self._rules if cause in rule.causes)

    @property
    def rules(self) -> tuple[Rule, ...]:
        return tuple(self._rules)

    def __len__(self) -> int:
        return len(self._rules)


# --- the built-in rules: one per known cause of a deviation ------------------------------


def _switch_source(ctx: DecisionContext, trigger: Trigger) -> Proposal | None:
    failing = trigger.source
    if failing is None:
        return None
    alternatives = [
        s
        for s in ctx.state.sources.values()
        if s.source != failing.source and s.status is ObservationStatus.OK
    ]
    if not alternatives:
        return Proposal(
            "retry_later",
            0.5,
            f"{failing.source} failed ({trigger.cause}) and no other source is healthy",
            {"source": failing.source},
        )
    best = max(alternatives, key=lambda s: (s.confidence, -s.age_s))
    return Proposal(
        "switch_source",
        0.9,
        f"{failing.source} failed ({trigger.cause}); {best.source} is healthy "
        f"(confidence {best.confidence:.2f})",
        {"from": failing.source, "to": best.source},
    )


def _back_off(ctx: DecisionContext, trigger: Trigger) -> Proposal | None:
    source = trigger.source
    if source is None:
        return None
    if source.retry_after_s is not None:
        delay, confidence = source.retry_after_s, 0.95
        why = f"{source.source} asked us to retry after {delay:g} s"
    else:
        delay, confidence = float(ctx.context.get("backoff_s", 1.0)), 0.8
        why = f"{source.source} is rate limiting us without Retry-After; backing off {delay:g} s"
    return Proposal("back_off", confidence, why, {"source": source.source, "delay_s": delay})


def _empty(ctx: DecisionContext, trigger: Trigger) -> Proposal | None:
    source = trigger.source
    if source is None:
        return None
    if ctx.context.get("query_widened", False):
        return Proposal(
            "ask_user",
            0.7,
            f"{source.source} found no match even with the widened query; "
            "no match is not the absence of a constraint, so ask",
            {"source": source.source},
        )
    return Proposal(
        "widen_query",
        0.6,
        f"{source.source} found no match; widen the query before concluding anything",
        {"source": source.source},
    )


def _timeout(ctx: DecisionContext, trigger: Trigger) -> Proposal | None:
    source = trigger.source
    if source is None:
        return None
    factor = float(ctx.context.get("timeout_factor", 1.5))
    return Proposal(
        "widen_timeout",
        0.7,
        f"{source.source} timed out; widen its timeout by x{factor:g}",
        {"source": source.source, "factor": factor},
    )


def _stale(ctx: DecisionContext, trigger: Trigger) -> Proposal | None:
    source = trigger.source
    if source is None:
        return None
    max_age = float(ctx.context.get("max_stale_s", 300.0))
    if source.age_s <= max_age:
        return Proposal(
            "accept_stale",
            0.7,
            f"{source.source} is serving a cached answer {source.age_s:.0f} s old "
            f"(<= {max_age:g} s); accept it and say so",
            {"source": source.source, "age_s": source.age_s, "note": "answer may be outdated"},
        )
    return Proposal(
        "refresh",
        0.8,
        f"{source.source}'s cached answer is {source.age_s:.0f} s old (> {max_age:g} s); refresh",
        {"source": source.source, "age_s": source.age_s},
    )


def default_rules() -> RuleRegistry:
    """A registry with a rule for each common cause of a deviation.

    503/5xx or ``error`` → switch source (retry later when none is healthy);
    ``rate_limited`` → back off, honouring Retry-After; ``empty`` → widen the query, then
    ask; ``timeout`` → widen the timeout; ``stale`` → accept with a note or refresh.
    Context keys read: ``backoff_s``, ``query_widened``, ``timeout_factor``, ``max_stale_s``.
    """
    return RuleRegistry(Rule(name, causes, fn) for name, causes, fn in _DEFAULT_RULES)


def _causes(*causes: str | int | Enum) -> frozenset[str]:
    return frozenset(cause_key(c) for c in causes)


# The default rules with their cause keys, made once: every run builds its own registry (a
# caller may add to it), and the first rule alone names a hundred HTTP codes.
_DEFAULT_RULES: tuple[tuple[str, frozenset[str], RuleFn], ...] = (
    ("switch_source", _causes(ObservationStatus.ERROR, *range(500, 600)), _switch_source),
    ("back_off", _causes(ObservationStatus.RATE_LIMITED, 429), _back_off),
    ("widen_or_ask", _causes(ObservationStatus.EMPTY), _empty),
    ("widen_timeout", _causes(ObservationStatus.TIMEOUT), _timeout),
    ("stale", _causes(ObservationStatus.STALE), _stale),
)
