"""The few statistics the benchmarks report: Wilson intervals, differences of two rates
and percentiles.

A success rate measured on 10 episodes says little without its uncertainty; the Wilson
score interval stays inside [0, 1] and behaves at 0 % and 100 %, where the normal
approximation collapses to a zero-width interval. The difference of two rates gets
Newcombe's hybrid score interval (Newcombe 1998, method 10), built from the two Wilson
intervals: it keeps their good behaviour at the edges, where the Wald interval of a
difference again collapses.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from closedloop._exceptions import ConfigurationError
from closedloop._validation import require_int_at_least, require_positive

__all__ = ["Difference", "Rate", "difference", "percentile", "rate", "wilson_interval"]

Z95 = 1.959963984540054
"""The two-sided 95 % quantile of the standard normal distribution."""


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a binomial proportion (95 % by default).

    ``wilson_interval(0, 0)`` is ``(0.0, 1.0)``: no episodes, no information.
    """
    require_int_at_least("n", n, 0)
    require_int_at_least("successes", successes, 0)
    if successes > n:
        raise ConfigurationError("successes", successes, f"must be <= n ({n})")
    require_positive("z", z)
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    z2 = z * z
    denominator = 1.0 + z2 / n
    centre = (p + z2 / (2 * n)) / denominator
    half = z * math.sqrt(p * (1.0 - p) / n + z2 / (4 * n * n)) / denominator
    # Rounding can push the ends a hair past the exact 0 and 1 they equal at p = 0 or 1.
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return low, high


@dataclass(frozen=True, slots=True)
class Rate:
    """``k`` successes out of ``n``, with the rate and its 95 % Wilson interval."""

    k: int
    n: int
    value: float
    low: float
    high: float


def rate(successes: int, n: int) -> Rate:
    """A :class:`Rate` (the value is 0 when ``n`` is 0)."""
    low, high = wilson_interval(successes, n)
    return Rate(successes, n, successes / n if n else 0.0, low, high)


@dataclass(frozen=True, slots=True)
class Difference:
    """``treated`` minus ``baseline`` (two success rates), with its 95 % interval."""

    treated: Rate
    baseline: Rate
    value: float
    low: float
    high: float

    @property
    def spans_zero(self) -> bool:
        """True when the interval holds 0: the data cannot tell the two rates apart."""
        return self.low <= 0.0 <= self.high


def difference(treated_k: int, treated_n: int, baseline_k: int, baseline_n: int) -> Difference:
    """``treated_k / treated_n − baseline_k / baseline_n`` with Newcombe's hybrid score
    interval (Newcombe 1998, method 10): each side's distance to its own Wilson bound,
    combined in quadrature. Treats the two samples as independent, which is conservative
    for paired episodes (the same fault seeds) whose outcomes move together."""
    a, b = rate(treated_k, treated_n), rate(baseline_k, baseline_n)
    d = a.value - b.value
    low = d - math.sqrt((a.value - a.low) ** 2 + (b.high - b.value) ** 2)
    high = d + math.sqrt((a.high - a.value) ** 2 + (b.value - b.low) ** 2)
    return Difference(a, b, d, max(-1.0, low), min(1.0, high))


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0–100) by linear interpolation; None for no values."""
    if not 0.0 <= q <= 100.0 or math.isnan(q):
        raise ConfigurationError("q", q, "must lie in [0, 100]")
    if not values:
        return None
    ordered = sorted(float(v) for v in values)
    if len(ordered) == 1:
        return ordered[0]
    position = (len(ordered) - 1) * q / 100.0
    below = math.floor(position)
    above = min(below + 1, len(ordered) - 1)
    weight = position - below
    return ordered[below] + (ordered[above] - ordered[below]) * weight
