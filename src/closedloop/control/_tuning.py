"""Searching gains per task family (the tuner behind :class:`GainTable`).

Coordinate search: start from the fixed gains; for each gain in turn, score every level
of it with the others held, keep the best (a tie keeps the current value, so only a
measured improvement moves a gain); repeat for ``passes``. The scoring is the caller's
(``evaluate({domain: candidates})`` → a score per candidate, e.g. the success rate of live
episodes on the development split), so this module stays pure and deterministic: the
same scores give the same table.

With fewer than ``min_episodes`` episodes per evaluation the tuner refuses: it says so and
returns the current table unchanged (a table tuned on three episodes is noise).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from .._exceptions import ConfigurationError
from .._validation import require_finite, require_int_at_least
from ._gains import DEFAULT_GAIN_KEY, Gains, GainTable

__all__ = ["DEFAULT_LEVELS", "TuningResult", "tune_gains"]

DEFAULT_LEVELS: Mapping[str, tuple[float, ...]] = MappingProxyType(
    {
        "kp": (0.3, 0.8, 1.6),
        "ki": (0.0, 0.05, 0.2),
        "kd": (0.0, 0.3, 0.8),
        "eso_window": (6, 15, 30),
        "eso_min_samples": (3, 5),
    }
)
"""The grid the coordinate search walks, per gain."""

Evaluate = Callable[[Mapping[str, Sequence[Gains]]], Awaitable[Mapping[str, Sequence[float]]]]
"""``evaluate({domain: candidates})`` → ``{domain: one score per candidate}`` (one batch, so
a live evaluator can run every domain's episodes at once)."""


@dataclass(frozen=True, slots=True)
class TuningResult:
    """What a tuning run found: the table, whether it changed, and what it measured."""

    table: GainTable | None
    changed: bool
    message: str
    fixed_scores: Mapping[str, float] = field(default_factory=dict)
    best_scores: Mapping[str, float] = field(default_factory=dict)
    evaluations: int = 0
    episodes_used: int = 0


def _vary(base: Gains, name: str, level: float) -> Gains | None:
    values: dict[str, Any] = base.as_dict()
    values[name] = int(level) if name in ("eso_window", "eso_min_samples") else float(level)
    try:
        return Gains(**values)
    except ConfigurationError:  # e.g. a window below the samples it needs
        return None


async def tune_gains(
    domains: Sequence[str],
    evaluate: Evaluate,
    *,
    fixed: Gains,
    episodes: int,
    created_at: float,
    min_episodes: int = 8,
    levels: Mapping[str, Sequence[float]] = DEFAULT_LEVELS,
    passes: int = 1,
    current: GainTable | None = None,
) -> TuningResult:
    """Coordinate-search gains per domain; ``episodes`` is how many each evaluation runs.

    Returns the new table (``default`` row: ``fixed``) or, with too few episodes, the
    ``current`` one and ``changed=False``.
    """
    require_int_at_least("episodes", episodes, 0)
    require_int_at_least("min_episodes", min_episodes, 1)
    require_int_at_least("passes", passes, 1)
    require_finite("created_at", created_at)
    for name, values in levels.items():
        if name not in fixed.as_dict():
            raise ConfigurationError("levels", name, "is not a gain")
        if not values:
            raise ConfigurationError(f"levels[{name}]", values, "name at least one level")
    if not domains:
        raise ConfigurationError("domains", domains, "name at least one")
    if episodes < min_episodes:
        return TuningResult(
            current,
            False,
            f"too few episodes: {episodes} per evaluation, at least {min_episodes} needed; "
            "the gain table is unchanged",
        )
    rows: dict[str, Gains] = {DEFAULT_GAIN_KEY: fixed}
    first = await evaluate({d: [fixed] for d in domains})
    evaluations = len(domains)
    fixed_scores = {d: float(first[d][0]) for d in domains}
    best = dict.fromkeys(domains, fixed)
    best_scores = dict(fixed_scores)
    for _ in range(passes):
        for name, values in levels.items():
            asked: dict[str, list[Gains]] = {}
            for d in domains:
                varied = [g for v in values if (g := _vary(best[d], name, v)) is not None]
                asked[d] = [g for g in dict.fromkeys(varied) if g != best[d]]
            asked = {d: c for d, c in asked.items() if c}
            if not asked:
                continue
            scores = await evaluate(asked)
            for d, candidates in asked.items():
                evaluations += len(candidates)
                for candidate, score in zip(candidates, scores[d], strict=True):
                    if float(score) > best_scores[d]:
                        best[d], best_scores[d] = candidate, float(score)
    rows.update(best)
    table = GainTable(rows, created_at, f"coordinate search, {episodes} episodes per evaluation")
    moved = sorted(d for d in domains if rows[d] != fixed)
    message = (
        f"tuned {len(domains)} domains with {evaluations} evaluations; "
        f"moved from the fixed gains: {', '.join(moved) or 'none'}"
    )
    return TuningResult(
        table,
        True,
        message,
        fixed_scores,
        best_scores,
        evaluations,
        evaluations * episodes,
    )
