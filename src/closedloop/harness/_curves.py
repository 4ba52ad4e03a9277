"""Equal-cost reading of budgeted runs: pass rate against cumulative tokens and generations,
with intervals, and paired per problem.

A curve point says what the batch would return if the run stopped after that generation
(each problem's best so far). Two policies are compared at the same cost by reading both
curves there and pairing the problems: the difference in solved problems, with a 95 %
interval from the per-problem differences (a paired normal interval, as in McNemar's
setting: only problems on which the two disagree move it).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict

from ._budget import BudgetRun
from ._results import RefinementResult

__all__ = [
    "CurvePoint",
    "PairedComparison",
    "compare_at",
    "cost_curve",
    "round_curve",
    "solved_at",
    "wilson",
]

Z95 = 1.959963984540054
Unit = Literal["tokens", "generations"]
_FROZEN = ConfigDict(frozen=True)


def wilson(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson's score interval for a proportion (Wilson 1927); (0, 1) when ``n`` is 0."""
    if n <= 0:
        return 0.0, 1.0
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


class CurvePoint(BaseModel):
    """The batch after ``generations`` generations and ``tokens`` tokens."""

    model_config = _FROZEN

    generations: int
    tokens: int
    solved: int
    problems: int
    pass_rate: float
    """Mean over problems of the returned (best-so-far) pass rate."""
    solved_low: float
    solved_high: float
    """Wilson 95 % interval on the solved share."""


def cost_curve(run: BudgetRun) -> list[CurvePoint]:
    """One point per generation of ``run``, in the order the budget was spent."""
    names = [r.task for r in run.results]
    best = dict.fromkeys(names, 0.0)
    target = {r.task: r.target for r in run.results}
    points: list[CurvePoint] = []
    for rec in run.allocations:
        best[rec.problem] = max(best[rec.problem], rec.score)
        solved = sum(1 for name in names if best[name] >= target[name] - 1e-12)
        low, high = wilson(solved, len(names))
        points.append(
            CurvePoint(
                generations=rec.generations,
                tokens=rec.tokens,
                solved=solved,
                problems=len(names),
                pass_rate=statistics.fmean(best.values()),
                solved_low=low,
                solved_high=high,
            )
        )
    return points


def solved_at(run: BudgetRun, cost: float, unit: Unit = "tokens") -> dict[str, bool]:
    """Per problem, whether ``run`` had solved it once it had spent ``cost`` (generations
    made after that are not counted)."""
    target = {r.task: r.target for r in run.results}
    out = dict.fromkeys(target, False)
    for rec in run.allocations:
        spent = rec.tokens if unit == "tokens" else rec.generations
        if spent > cost:
            break
        if rec.score >= target[rec.problem] - 1e-12:
            out[rec.problem] = True
    return out


class PairedComparison(BaseModel):
    """``a`` against ``b`` at the same cost, problem by problem."""

    model_config = _FROZEN

    a: str
    b: str
    unit: str
    cost: float
    problems: int
    a_solved: int
    b_solved: int
    only_a: int
    only_b: int
    points: float
    """100 × (a's solved share − b's) at ``cost``."""
    low: float
    high: float
    """The paired 95 % interval on ``points``."""


def compare_at(a: BudgetRun, b: BudgetRun, cost: float, unit: Unit = "tokens") -> PairedComparison:
    """``a`` − ``b`` in solved problems once both have spent ``cost``; the problems must be
    the same."""
    sa, sb = solved_at(a, cost, unit), solved_at(b, cost, unit)
    if set(sa) != set(sb):
        raise ValueError("the two runs are not over the same problems")
    diffs = [float(sa[k]) - float(sb[k]) for k in sa]
    n = len(diffs)
    mean = statistics.fmean(diffs) if diffs else 0.0
    sd = statistics.stdev(diffs) if n > 1 else 0.0
    half = Z95 * sd / math.sqrt(n) if n else 0.0
    return PairedComparison(
        a=a.policy,
        b=b.policy,
        unit=unit,
        cost=cost,
        problems=n,
        a_solved=sum(sa.values()),
        b_solved=sum(sb.values()),
        only_a=sum(1 for k in sa if sa[k] and not sb[k]),
        only_b=sum(1 for k in sa if sb[k] and not sa[k]),
        points=100.0 * mean,
        # A difference of shares lies in [-100, 100] points whatever a small sample says.
        low=max(-100.0, 100.0 * (mean - half)),
        high=min(100.0, 100.0 * (mean + half)),
    )


def common_cost(runs: Sequence[BudgetRun], unit: Unit = "tokens") -> int:
    """The most every run has spent: where all curves can be read."""
    return min(r.tokens if unit == "tokens" else r.generations for r in runs)


def round_curve(results: Sequence[RefinementResult], rounds: int) -> list[dict[str, float]]:
    """A per-round run read at equal cost: after each round k, the generations and tokens
    every problem had spent through round k, and the mean returned pass rate and solved
    count then (a run that stopped early spends nothing more)."""
    points: list[dict[str, float]] = []
    for k in range(1, rounds + 1):
        upto = [r.rounds[:k] for r in results]
        best = [max((x.score for x in rs if x.score is not None), default=0.0) for rs in upto]
        targets = [r.target for r in results]
        points.append(
            {
                "round": k,
                "generations": sum(len(rs) for rs in upto),
                "tokens": sum(x.prompt_tokens + x.completion_tokens for rs in upto for x in rs),
                "pass_rate": statistics.fmean(best) if best else 0.0,
                "solved": sum(1 for b, t in zip(best, targets, strict=True) if b >= t - 1e-12),
            }
        )
    return points
