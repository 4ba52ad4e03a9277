"""The success–cost plane of the faults benchmark: fixed retry budgets against the loop.

Every fixed setting of the retry knobs (attempts per call × first backoff) is run on the
same episodes (same tasks, same fault seeds) as one point: success with its 95 % interval
against requests and latency per episode. The points no other point beats on success at
no more requests form the frontier; each adaptive strategy is then read against it: does
it reach the best fixed success at no more than 70 % of that setting's requests and
latency, or more success at equal cost (its 95 % interval above every fixed setting within
5 % of its requests or cheaper)?
"""

from __future__ import annotations

import asyncio
import dataclasses
import statistics
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from closedloop._exceptions import ConfigurationError

from ._faults import run_faults_bench
from ._runner import FaultsConfig
from ._stats import wilson_interval

__all__ = ["BudgetPoint", "budget_frontier", "run_budget_sweep"]

COST_SHARE = 0.7
"""The share of the best fixed setting's requests and latency the loop must stay under."""

EQUAL_COST = 1.05
"""Requests within 5 % of the loop's count as equal cost."""


@dataclasses.dataclass(frozen=True, slots=True)
class BudgetPoint:
    """One strategy at one setting of the knobs, over the sweep's episodes."""

    strategy: str
    attempts: int
    backoff_s: float
    episodes: int
    success: float
    ci_low: float
    ci_high: float
    requests: float
    latency_s: float
    model_calls: float

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _point(strategy: str, config: FaultsConfig, rows: Sequence[Any]) -> BudgetPoint:
    wins = sum(1 for r in rows if r.success)
    low, high = wilson_interval(wins, len(rows))
    return BudgetPoint(
        strategy=strategy,
        attempts=config.attempts,
        backoff_s=config.backoff_s,
        episodes=len(rows),
        success=wins / len(rows) if rows else 0.0,
        ci_low=low,
        ci_high=high,
        requests=statistics.fmean(r.requests for r in rows) if rows else 0.0,
        latency_s=statistics.fmean(r.latency_s for r in rows) if rows else 0.0,
        model_calls=statistics.fmean(r.model_calls for r in rows) if rows else 0.0,
    )


def budget_frontier(points: Sequence[BudgetPoint]) -> list[BudgetPoint]:
    """The points no other point beats: as much success at no more requests, and more
    success or fewer requests. Sorted by requests."""
    front = [
        p
        for p in points
        if not any(
            q.success >= p.success
            and q.requests <= p.requests
            and (q.success > p.success or q.requests < p.requests)
            for q in points
        )
    ]
    return sorted(front, key=lambda p: (p.requests, -p.success))


def _verdict(adaptive: BudgetPoint, fixed: Sequence[BudgetPoint]) -> dict[str, Any]:
    best = max(fixed, key=lambda p: (p.success, -p.requests))
    cheaper = (
        adaptive.success >= best.success
        and adaptive.requests <= COST_SHARE * best.requests
        and adaptive.latency_s <= COST_SHARE * best.latency_s
    )
    # "More success at equal cost": the loop's 95 % interval above the success of every
    # fixed setting that costs no more than 5 % over the loop (a frontier that jumps just
    # past the loop's cost is not beaten by staying short of the jump).
    same_cost = [p for p in fixed if p.requests <= EQUAL_COST * adaptive.requests]
    better = bool(same_cost) and adaptive.ci_low > max(p.success for p in same_cost)
    return {
        "strategy": adaptive.strategy,
        "best_fixed": best.as_dict(),
        "success_vs_best": adaptive.success - best.success,
        "requests_share_of_best": adaptive.requests / best.requests if best.requests else None,
        "latency_share_of_best": adaptive.latency_s / best.latency_s if best.latency_s else None,
        "target_met": cheaper or better,
        "how": "best success at <= 70 % of its requests and latency"
        if cheaper
        else "more success (its 95 % interval) than any fixed setting of equal or lower cost"
        if better
        else "neither",
    }


async def run_budget_sweep(
    base: FaultsConfig,
    *,
    attempts: Sequence[int] = (1, 2, 3, 4, 5, 6),
    backoffs: Sequence[float] = (0.1, 0.5, 2.0),
    fixed: str = "fixed_retries",
    adaptive: Sequence[str] = ("closedloop_pid", "closedloop_budget"),
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Every fixed (attempts, backoff) point of ``fixed``, then each ``adaptive`` strategy
    at the sweep's largest attempt budget, all on ``base``'s episodes (every backoff
    through ``sleep``). ``progress`` is told a line as each point is done."""
    if not attempts or any(
        isinstance(a, bool) or not isinstance(a, int) or a < 1 for a in attempts
    ):
        raise ConfigurationError("attempts", list(attempts), "whole numbers of at least 1")
    if not backoffs or any(not isinstance(b, int | float) or b < 0 for b in backoffs):
        raise ConfigurationError("backoffs", list(backoffs), "seconds, at least 0")
    quiet = dataclasses.replace(base, out=None)
    points: list[BudgetPoint] = []
    say = progress or (lambda _line: None)
    total = len(attempts) * len(backoffs) + 1
    for a in attempts:
        for b in backoffs:
            config = dataclasses.replace(quiet, strategies=(fixed,), attempts=a, backoff_s=b)
            report = await run_faults_bench(config, sleep=sleep)
            points.append(_point(fixed, config, report.episodes))
            say(f"sweep {len(points)}/{total}: {fixed} attempts {a}, backoff {b} s done")
    top = dataclasses.replace(quiet, strategies=tuple(adaptive), attempts=max(attempts))
    report = await run_faults_bench(top, sleep=sleep)
    say(f"sweep {total}/{total}: {', '.join(adaptive)} at attempts {max(attempts)} done")
    loops = [
        _point(name, top, [r for r in report.episodes if r.strategy == name]) for name in adaptive
    ]
    front = budget_frontier(points)
    return {
        "command": base.command,  # the line that rewrites this sweep
        "config": {
            **{k: v for k, v in base.as_dict().items() if k not in ("strategies", "out")},
            "attempts_swept": list(attempts),
            "backoffs_swept": list(backoffs),
            "fixed": fixed,
            "adaptive": list(adaptive),
        },
        "fixed": [p.as_dict() for p in points],
        "frontier": [p.as_dict() for p in front],
        "adaptive": [p.as_dict() for p in loops],
        "verdicts": [_verdict(p, points) for p in loops],
    }


def plot_budget(sweep: dict[str, Any], path: Path) -> Path | None:
    """The success–requests plane: fixed points, their frontier, the adaptive rows."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # the plots extra is not installed: the JSON holds everything
        return None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    fixed = sweep["fixed"]
    ax.scatter([p["requests"] for p in fixed], [p["success"] for p in fixed], c="grey",
               label="fixed (attempts × backoff)")  # fmt: skip
    front = sweep["frontier"]
    ax.plot([p["requests"] for p in front], [p["success"] for p in front], "k--",
            label="frontier of fixed settings")  # fmt: skip
    for p in sweep["adaptive"]:
        ax.errorbar(p["requests"], p["success"],
                    yerr=[[p["success"] - p["ci_low"]], [p["ci_high"] - p["success"]]],
                    fmt="o", capsize=3, label=p["strategy"])  # fmt: skip
    ax.set_xlabel("requests per episode")
    ax.set_ylabel("success")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
