"""Adaptive stopping for sampling votes, and the votes themselves.

A vote draws samples of one decision (normalised call keys, ``None`` where a sample was
not a valid call) and runs the call most of them make (self-consistency, Wang et al.
2023). Drawing a fixed number of samples spends as much on an easy decision as on a hard
one; a stop rule looks at the samples drawn so far and says when more would not change
the outcome:

- ``BetaStop``: Adaptive-Consistency (Aggarwal et al., EMNLP 2023). With ``a`` and ``b``
  the counts of the two most common answers, stop once P(p1 > p2) under a Beta(a + 1,
  b + 1) posterior reaches a confidence (0.95 in the paper).
- ``WindowStop``: Early-Stopping Self-Consistency (Li et al., ICLR 2024). Stop when the
  last ``window`` samples all make the same call.
- ``ConfidenceStop``: one sample is enough when its own confidence is high (the
  single-sample stop of reasoning-aware self-consistency, 2026).
- ``FixedVotes``: the fixed budget, ``k`` samples, for comparison.

Every rule also stops at its ``max_samples``. ``plurality`` and ``weighted_vote``
(confidence-weighted self-consistency, CISC, Taubenfeld et al. 2025) pick the winner.
Everything here is pure: a rule is a frozen value and ``should_stop`` a function of the
keys drawn so far.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, runtime_checkable
from typing import Protocol as _Protocol

from .._exceptions import ConfigurationError
from .._validation import require_int_at_least, require_unit_interval

__all__ = [
    "BetaStop",
    "ConfidenceStop",
    "FixedVotes",
    "StopRule",
    "WindowStop",
    "beta_superiority",
    "plurality",
    "top_two",
    "weighted_vote",
]

Keys = Sequence[str | None]
Confidences = Sequence[float | None] | None


@runtime_checkable
class StopRule(_Protocol):
    """A rule that says, from the samples drawn so far, whether to stop drawing."""

    @property
    def max_samples(self) -> int: ...

    def should_stop(self, keys: Keys, confidences: Confidences = None) -> bool:
        """Whether to stop, given the keys drawn so far and their confidences."""
        ...


def top_two(keys: Keys) -> tuple[int, int]:
    """The counts of the two most common valid keys (0 where there is none)."""
    counts = [c for _, c in Counter(k for k in keys if k is not None).most_common(2)]
    counts += [0] * (2 - len(counts))
    return counts[0], counts[1]


def beta_superiority(a: int, b: int) -> float:
    """P(p1 > p2) for the top two answers after ``a`` and ``b`` votes, computed exactly.

    With a uniform prior the posterior of p1 / (p1 + p2) is Beta(a + 1, b + 1), and for
    integer parameters its tail at one half is a binomial sum:
    P(X > 1/2) = P(Binomial(a + b + 1, 1/2) <= a) = sum_{j <= a} C(n, j) / 2^n.
    """
    a = require_int_at_least("a", a, 0)
    b = require_int_at_least("b", b, 0)
    n = a + b + 1
    # Exact integer arithmetic, then one division: no cancellation for any counts.
    return float(sum(math.comb(n, j) for j in range(a + 1)) / 2**n)


def _check_keys(keys: Keys) -> None:
    if isinstance(keys, str):
        raise ConfigurationError("keys", keys, "must be a sequence of call keys, not one string")


def _check_max(max_samples: int) -> None:
    require_int_at_least("max_samples", max_samples, 1)


@dataclass(frozen=True, slots=True, kw_only=True)
class BetaStop:
    """Adaptive-Consistency (Aggarwal et al., EMNLP 2023): stop once the Beta posterior
    on the top two vote counts gives the leader P(p1 > p2) >= ``threshold``.

    One sample gives 0.75, two agreeing 0.875, three 0.9375, four 0.969: at the paper's
    0.95 a unanimous vote stops after four samples, so with ``max_samples`` at five
    the rule saves samples only where the first four agree. Invalid samples count
    toward ``max_samples`` but vote for nothing.
    """

    threshold: float = 0.95
    max_samples: int = 5
    min_samples: int = 1

    def __post_init__(self) -> None:
        require_unit_interval("threshold", self.threshold)
        _check_max(self.max_samples)
        require_int_at_least("min_samples", self.min_samples, 1)
        if self.min_samples > self.max_samples:
            raise ConfigurationError("min_samples", self.min_samples, "must be <= max_samples")

    def should_stop(self, keys: Keys, confidences: Confidences = None) -> bool:
        """Stop at the budget, or once the leader's posterior lead reaches the threshold."""
        _check_keys(keys)
        if len(keys) >= self.max_samples:
            return True
        if len(keys) < self.min_samples:
            return False
        a, b = top_two(keys)
        return a > 0 and beta_superiority(a, b) >= self.threshold


@dataclass(frozen=True, slots=True, kw_only=True)
class WindowStop:
    """Early-Stopping Self-Consistency (Li et al., ICLR 2024): stop as soon as the last
    ``window`` samples make one and the same valid call."""

    window: int = 2
    max_samples: int = 5

    def __post_init__(self) -> None:
        require_int_at_least("window", self.window, 1)
        _check_max(self.max_samples)

    def should_stop(self, keys: Keys, confidences: Confidences = None) -> bool:
        """Stop at the budget, or once the last ``window`` samples make the same valid call."""
        _check_keys(keys)
        if len(keys) >= self.max_samples:
            return True
        if len(keys) < self.window:
            return False
        last = keys[-self.window :]
        return last[0] is not None and all(k == last[0] for k in last)


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfidenceStop:
    """A single confident sample ends the vote: stop after the first sample when it is a
    valid call with confidence >= ``threshold``; otherwise draw up to ``max_samples``.

    The confidence is the caller's calibrated reading of that one sample (for example
    a decision-token log-probability mapped to a probability). ``when_unknown`` says
    what a valid first sample with no reading does: ``"draw"`` (the default) draws the
    rest, as for an unsure one; ``"stop"`` ends the vote there, so a model that gives no
    confidence costs one sample, as with no rule at all."""

    threshold: float = 0.9
    max_samples: int = 5
    when_unknown: Literal["draw", "stop"] = "draw"

    def __post_init__(self) -> None:
        require_unit_interval("threshold", self.threshold)
        _check_max(self.max_samples)
        if self.when_unknown not in ("draw", "stop"):
            raise ConfigurationError("when_unknown", self.when_unknown, "must be draw or stop")

    def should_stop(self, keys: Keys, confidences: Confidences = None) -> bool:
        """Stop at the budget, or after a first sample that is valid and confident enough
        (or valid with no reading, under ``when_unknown="stop"``)."""
        _check_keys(keys)
        if len(keys) >= self.max_samples:
            return True
        if not keys or keys[0] is None:
            return False
        first = confidences[0] if confidences else None
        if first is None:
            return self.when_unknown == "stop"
        return first >= self.threshold


@dataclass(frozen=True, slots=True, kw_only=True)
class FixedVotes:
    """A fixed budget: always ``k`` samples."""

    k: int = 3

    def __post_init__(self) -> None:
        require_int_at_least("k", self.k, 1)

    @property
    def max_samples(self) -> int:
        return self.k

    def should_stop(self, keys: Keys, confidences: Confidences = None) -> bool:
        """Stop once ``k`` samples are drawn."""
        _check_keys(keys)
        return len(keys) >= self.k


def plurality(keys: Keys) -> tuple[str | None, float]:
    """The most common valid key and its share of all samples (invalid ones included, so
    they count against every call); a tie goes to the key drawn first. ``(None, 0.0)``
    when no sample is valid."""
    _check_keys(keys)
    if not keys:
        raise ConfigurationError("keys", list(keys), "a vote needs at least one sample")
    counts = Counter(k for k in keys if k is not None)
    if not counts:
        return None, 0.0
    # Counter keeps first-seen order, and max returns the first maximum: earliest wins.
    winner = max(counts, key=lambda k: counts[k])
    return winner, counts[winner] / len(keys)


def weighted_vote(keys: Keys, confidences: Sequence[float | None]) -> tuple[str | None, float]:
    """Confidence-weighted plurality (CISC, Taubenfeld et al. 2025): each sample votes with
    its own confidence in [0, 1] (a missing one votes with weight 0); the winner's share
    is its weight over the total weight. A tie goes to the key drawn first; when no valid
    sample carries any weight it falls back to ``plurality``."""
    _check_keys(keys)
    if len(confidences) != len(keys):
        raise ConfigurationError(
            "confidences", list(confidences), f"needs one value per key ({len(keys)})"
        )
    if not keys:
        raise ConfigurationError("keys", list(keys), "a vote needs at least one sample")
    weights: dict[str, float] = {}
    total = 0.0
    for key, conf in zip(keys, confidences, strict=True):
        w = 0.0 if conf is None else require_unit_interval("confidences[i]", conf)
        total += w
        if key is not None:
            weights[key] = weights.get(key, 0.0) + w
    if not any(weights.values()):
        # No valid sample carries any weight: the confidences say nothing, count heads.
        return plurality(keys)
    winner = max(weights, key=lambda k: weights[k])
    return winner, weights[winner] / total
