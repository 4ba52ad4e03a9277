"""The success–cost plane of replayed strategies, with paired comparisons.

Every strategy is replayed on the same tasks, so comparisons are paired per task:
McNemar's exact test on the discordant pairs for success (McNemar 1947; the exact form is
a two-sided binomial test on them) and a paired percentile bootstrap of the mean cost
difference (Efron and Tibshirani 1993). Each row's success rate carries its 95 % Wilson
interval, each mean cost a percentile bootstrap interval; the bootstrap draws the same
task indices for every row, so the intervals are comparable and the run is repeatable.
The frontier is the set of fixed settings that no other fixed setting beats on both
success and mean seconds; an adaptive strategy is judged by where it sits against it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from closedloop import ConfigurationError
from closedloop_bench.benchmarks._stats import wilson_interval

from ._replay import Outcome

__all__ = ["Row", "frontier", "mcnemar_exact", "paired_bootstrap", "plane_report", "plot_plane"]

BOOTSTRAP = 2000
"""Bootstrap resamples: enough for stable 95 % percentile ends on a few hundred tasks."""
COSTS = ("seconds", "tokens", "calls")


@dataclass(frozen=True, slots=True)
class Row:
    """One strategy on one model (or ladder): its per-task outcomes, in task order."""

    name: str
    model: str
    group: str
    outcomes: tuple[Outcome, ...]

    @property
    def label(self) -> str:
        return f"{self.model} · {self.name}"


def mcnemar_exact(a: Sequence[bool], b: Sequence[bool]) -> dict[str, Any]:
    """McNemar's exact test of paired successes: ``only_a`` and ``only_b`` count the tasks
    one side solves and the other not; the two-sided p-value is the binomial tail of the
    smaller count at one half, doubled (1 with no discordant pair)."""
    if len(a) != len(b):
        raise ConfigurationError("b", len(b), f"needs one verdict per task of a ({len(a)})")
    only_a = sum(x and not y for x, y in zip(a, b, strict=True))
    only_b = sum(y and not x for x, y in zip(a, b, strict=True))
    n = only_a + only_b
    tail = sum(math.comb(n, i) for i in range(min(only_a, only_b) + 1)) / 2**n if n else 1.0
    return {"only_a": only_a, "only_b": only_b, "p": min(1.0, 2 * tail)}


def _indices(n: int, resamples: int, seed: int) -> np.ndarray[Any, np.dtype[np.int64]]:
    return np.random.default_rng(seed).integers(0, n, size=(resamples, n))


def _interval(values: np.ndarray[Any, Any], idx: np.ndarray[Any, Any]) -> tuple[float, float]:
    means = values[idx].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(low), float(high)


def paired_bootstrap(
    a: Sequence[float], b: Sequence[float], *, resamples: int = BOOTSTRAP, seed: int = 0
) -> dict[str, float]:
    """The mean of ``a - b`` per task and its paired percentile bootstrap 95 % interval."""
    if len(a) != len(b) or not a:
        raise ConfigurationError("b", len(b), f"needs one value per task of a ({len(a)}), >= 1")
    diff = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    low, high = _interval(diff, _indices(len(diff), resamples, seed))
    return {"mean": float(diff.mean()), "low": low, "high": high}


def _cost(outcomes: Sequence[Outcome], what: str) -> np.ndarray[Any, Any]:
    return np.asarray([float(getattr(o, what)) for o in outcomes], dtype=float)


def _stats(row: Row, idx: np.ndarray[Any, Any]) -> dict[str, Any]:
    n = len(row.outcomes)
    k = sum(o.success for o in row.outcomes)
    low, high = wilson_interval(k, n)
    accepted = sum(o.accepted for o in row.outcomes)
    out: dict[str, Any] = {
        "name": row.name,
        "model": row.model,
        "group": row.group,
        "n": n,
        "success": k,
        "success_rate": k / n if n else 0.0,
        "success_ci": [low, high],
        "escalated": sum(o.escalated for o in row.outcomes),
    }
    if accepted < n:
        wrong = sum(o.accepted and not o.success for o in row.outcomes)
        out["coverage"] = accepted / n if n else None
        out["accepted_error"] = wrong / accepted if accepted else None
    for what in COSTS:
        values = _cost(row.outcomes, what)
        out[f"mean_{what}"] = float(values.mean()) if n else 0.0
        out[f"mean_{what}_ci"] = list(_interval(values, idx)) if n else [0.0, 0.0]
    return out


def _paired(row: Row, ref: Row, seed: int) -> dict[str, Any]:
    if [o.task_id for o in row.outcomes] != [o.task_id for o in ref.outcomes]:
        raise ConfigurationError("rows", row.label, f"not on the same tasks as {ref.label}")
    out: dict[str, Any] = {
        "success": mcnemar_exact(
            [o.success for o in row.outcomes], [o.success for o in ref.outcomes]
        )
    }
    for what in COSTS:
        diff = paired_bootstrap(
            _cost(row.outcomes, what).tolist(), _cost(ref.outcomes, what).tolist(), seed=seed
        )
        diff["separated"] = float(diff["low"] > 0 or diff["high"] < 0)
        out[what] = diff
    return out


def frontier(stats: Sequence[Mapping[str, Any]]) -> list[str]:
    """Labels of the fixed settings that no other fixed setting beats: at most the mean
    seconds with at least the success, better in one."""
    fixed = [s for s in stats if s["group"] == "fixed"]
    out = []
    for s in fixed:
        beaten = any(
            o["mean_seconds"] <= s["mean_seconds"]
            and o["success_rate"] >= s["success_rate"]
            and (o["mean_seconds"] < s["mean_seconds"] or o["success_rate"] > s["success_rate"])
            for o in fixed
        )
        if not beaten:
            out.append(f"{s['model']} · {s['name']}")
    return out


def _against_frontier(s: Mapping[str, Any], fixed: Sequence[Mapping[str, Any]]) -> float | None:
    # The success gap to the best fixed setting that costs no more: > 0 lies above it.
    cheaper = [f["success_rate"] for f in fixed if f["mean_seconds"] <= s["mean_seconds"]]
    return None if not cheaper else s["success_rate"] - max(cheaper)


def plane_report(
    rows: Sequence[Row], reference: str, *, seed: int = 0, resamples: int = BOOTSTRAP
) -> dict[str, Any]:
    """Each row's success and cost with intervals, each compared per task with the row
    labelled ``reference``, the frontier of fixed settings and each other row's gap to it."""
    if not rows:
        raise ConfigurationError("rows", rows, "the plane needs at least one strategy")
    by_label = {r.label: r for r in rows}
    if reference not in by_label:
        raise ConfigurationError("reference", reference, f"is not a row: {', '.join(by_label)}")
    n = len(rows[0].outcomes)
    idx = _indices(max(n, 1), resamples, seed)
    stats = [_stats(r, idx) for r in rows]
    ref = by_label[reference]
    fixed = [s for s in stats if s["group"] == "fixed"]
    for s, row in zip(stats, rows, strict=True):
        s["vs_reference"] = None if row is ref else _paired(row, ref, seed)
        if s["group"] != "fixed":
            s["above_frontier_by"] = _against_frontier(s, fixed)
    return {
        "n": n,
        "reference": reference,
        "bootstrap": {"resamples": resamples, "seed": seed},
        "frontier": frontier(stats),
        "rows": stats,
    }


def plot_plane(report: Mapping[str, Any], path: Path, title: str = "") -> Path:
    """Success rate against mean seconds per task: fixed settings joined along their
    frontier, the rest as marks, each with its success interval."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 6))
    kinds = {
        "cascade": ("D", "tab:orange"),
        "adaptive": ("^", "tab:green"),
        "confident": ("s", "tab:purple"),
        "risk": ("x", "tab:red"),
        "abstain": ("v", "tab:brown"),
    }
    seen: set[str] = set()
    for s in report["rows"]:
        kind = (
            "abstain"
            if s["group"] == "abstain"
            else next((k for k in kinds if s["name"].startswith(k)), "votes")
        )
        mark, colour = kinds.get(kind, ("o", "tab:blue"))
        lo, hi = s["success_ci"]
        y = s["success_rate"]
        ax.errorbar(
            s["mean_seconds"],
            y,
            yerr=[[y - lo], [hi - y]],
            fmt=mark,
            color=colour,
            alpha=0.8,
            markersize=5,
            label=None if kind in seen else kind,
        )
        seen.add(kind)
        label = f"{s['model']} · {s['name']}"
        if label in report["frontier"] or label == report["reference"]:
            ax.annotate(
                label,
                (s["mean_seconds"], y),
                fontsize=6,
                xytext=(3, -8),
                textcoords="offset points",
            )
    front = sorted(
        (s for s in report["rows"] if f"{s['model']} · {s['name']}" in report["frontier"]),
        key=lambda s: s["mean_seconds"],
    )
    ax.plot([s["mean_seconds"] for s in front], [s["success_rate"] for s in front], "k--", lw=1)
    ax.set_xlabel("mean seconds per task (replayed from the bank)")
    ax.set_ylabel("success rate (95 % Wilson interval)")
    ax.set_title(title or f"{report['n']} tasks; dashed: the frontier of fixed settings")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
