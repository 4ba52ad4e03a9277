"""The tool-calling report: per task results, cells per strategy × model × family, the
table, the JSON and the success–cost plane.

Each cell gives the success rate with its 95 % Wilson score interval (Wilson 1927; it
stays inside [0, 1] and keeps its width at 0 % and 100 %), and the mean model calls,
tokens in and out and wall seconds per task. On the plane each strategy × model is one
point (all families together); the frontier of fixed settings joins the fixed points that
no other fixed point beats on both success and cost (a Pareto frontier), so a strategy
that adapts shows whether it sits on, above or below what fixed settings can buy.

Two counts say how a strategy failed or what it wasted. ``halted_no_answer``: the runs
that ended with no call and no answer (a halt, a model error), which fail on every family,
irrelevance included. ``idle_calls``: for the agent rows, the model calls of the steps
that executed nothing (a refused proposal, a refused repeat, a final answer with no
call), from the step records each of their results keeps; :func:`idle_on_one_call` sums
it over the one-call families, where the ideal is none.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from closedloop_bench.benchmarks import wilson_interval

from ._format import FAMILIES, ONE_CALL_FAMILIES, ToolTask
from ._score import TaskScore
from ._strategies import Attempt

__all__ = [
    "REPORT_SCHEMA",
    "Cell",
    "TaskResult",
    "ToolsReport",
    "fixed_frontier",
    "idle_on_one_call",
    "plot_plane",
    "read_report",
    "render_table",
    "summarise",
    "write_report",
]

REPORT_SCHEMA = 1
"""The version of the report's JSON layout."""

ALL = "all"
"""The family label of a cell over every family."""


@dataclass(frozen=True, slots=True)
class TaskResult:
    """One task under one strategy and one model; an agent's keeps its halt, its compacted
    step records (``steps``: e, u, confidence, actuators, the call and whether it ran) and
    the model calls that executed nothing (``idle_calls``; None for the one-call rows)."""

    task_id: str
    family: str
    domain: str
    strategy: str
    model: str
    success: bool
    reason: str
    calls: tuple[dict[str, Any], ...]
    final_text: str
    model_calls: int
    tokens_in: int
    tokens_out: int
    wall_s: float
    error: str | None
    halted_no_answer: bool = False
    halt: str | None = None
    idle_calls: int | None = None
    steps: tuple[dict[str, Any], ...] = ()

    @classmethod
    def of(
        cls, task: ToolTask, strategy: str, model: str, attempt: Attempt, verdict: TaskScore
    ) -> TaskResult:
        steps = attempt.extra.get("steps")
        return cls(
            task_id=task.id,
            family=task.family,
            domain=task.domain,
            strategy=strategy,
            model=model,
            success=verdict.success,
            reason=verdict.reason,
            calls=tuple(c.as_dict() for c in attempt.calls),
            final_text=attempt.final_text[:200],
            model_calls=attempt.model_calls,
            tokens_in=attempt.tokens_in,
            tokens_out=attempt.tokens_out,
            wall_s=round(attempt.wall_s, 4),
            error=attempt.error,
            halted_no_answer=not attempt.calls and not attempt.answered,
            halt=attempt.extra.get("halt"),
            idle_calls=attempt.extra.get("idle_calls"),
            steps=() if steps is None else tuple(steps),
        )


@dataclass(frozen=True, slots=True)
class Cell:
    """One strategy × model × family: success with its interval, and the mean cost."""

    strategy: str
    model: str
    family: str
    n: int
    successes: int
    rate: float
    low: float
    high: float
    model_calls: float
    tokens_in: float
    tokens_out: float
    wall_s: float
    errors: int
    halted_no_answer: int = 0
    idle_calls: int | None = None

    @property
    def tokens(self) -> float:
        return self.tokens_in + self.tokens_out


@dataclass(frozen=True, slots=True)
class ToolsReport:
    """A whole run: what ran, every result and every cell."""

    source: str
    models: tuple[str, ...]
    strategies: Mapping[str, bool]
    results: tuple[TaskResult, ...]
    cells: tuple[Cell, ...]
    wall_s: float
    meta: Mapping[str, Any] = field(default_factory=dict)

    def cell(self, strategy: str, model: str, family: str = ALL) -> Cell:
        for c in self.cells:
            if (c.strategy, c.model, c.family) == (strategy, model, family):
                return c
        raise KeyError((strategy, model, family))

    def as_dict(self) -> dict[str, Any]:
        return {
            "schema": REPORT_SCHEMA,
            "benchmark": "tools",
            "source": self.source,
            "models": list(self.models),
            "strategies": [{"name": n, "fixed": f} for n, f in self.strategies.items()],
            "wall_s": round(self.wall_s, 3),
            "meta": dict(self.meta),
            "cells": [asdict(c) for c in self.cells],
            "results": [asdict(r) for r in self.results],
        }


def _mean(values: Sequence[float]) -> float:
    return round(sum(values) / len(values), 4) if values else 0.0


def _cell(strategy: str, model: str, family: str, rows: Sequence[TaskResult]) -> Cell:
    k = sum(r.success for r in rows)
    low, high = wilson_interval(k, len(rows))
    return Cell(
        strategy=strategy,
        model=model,
        family=family,
        n=len(rows),
        successes=k,
        rate=round(k / len(rows), 4) if rows else 0.0,
        low=round(low, 4),
        high=round(high, 4),
        model_calls=_mean([r.model_calls for r in rows]),
        tokens_in=_mean([r.tokens_in for r in rows]),
        tokens_out=_mean([r.tokens_out for r in rows]),
        wall_s=_mean([r.wall_s for r in rows]),
        errors=sum(r.error is not None for r in rows),
        halted_no_answer=sum(r.halted_no_answer for r in rows),
        idle_calls=_total_idle(rows),
    )


def _total_idle(rows: Sequence[TaskResult]) -> int | None:
    known = [r.idle_calls for r in rows if r.idle_calls is not None]
    return sum(known) if known else None


def idle_on_one_call(report: ToolsReport) -> list[tuple[str, str, int, int]]:
    """``(strategy, model, idle, calls)`` for every row with step records: the model
    calls that executed nothing on the one-call families, of all its model calls there."""
    out: list[tuple[str, str, int, int]] = []
    for strategy in report.strategies:
        for model in report.models:
            rows = [
                r
                for r in report.results
                if r.strategy == strategy
                and r.model == model
                and r.family in ONE_CALL_FAMILIES
                and r.idle_calls is not None
            ]
            if rows:
                idle = sum(r.idle_calls or 0 for r in rows)
                out.append((strategy, model, idle, sum(r.model_calls for r in rows)))
    return out


def summarise(
    results: Sequence[TaskResult],
    *,
    source: str,
    models: Sequence[str],
    strategies: Mapping[str, bool],
    wall_s: float = 0.0,
    meta: Mapping[str, Any] | None = None,
) -> ToolsReport:
    """The report of ``results``: a cell per strategy × model × family, and one over all."""
    cells: list[Cell] = []
    for strategy in strategies:
        for model in models:
            mine = [r for r in results if r.strategy == strategy and r.model == model]
            if not mine:
                continue  # a strategy that runs on the strongest model or the ladder only
            for family in FAMILIES:
                rows = [r for r in mine if r.family == family]
                if rows:
                    cells.append(_cell(strategy, model, family, rows))
            cells.append(_cell(strategy, model, ALL, mine))
    return ToolsReport(
        source=source,
        models=tuple(models),
        strategies=dict(strategies),
        results=tuple(results),
        cells=tuple(cells),
        wall_s=wall_s,
        meta=dict(meta or {}),
    )


def write_report(report: ToolsReport, path: str | Path) -> Path:
    """Write the report's JSON (parents created); its path."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report.as_dict(), indent=1, ensure_ascii=False) + "\n")
    return out


def read_report(path: str | Path) -> ToolsReport:
    """A report written by :func:`write_report`, read back (to re-plot or re-tabulate)."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if data.get("benchmark") != "tools" or data.get("schema") != REPORT_SCHEMA:
        raise ValueError(f"path={str(path)!r}: not a tool-calling report of schema {REPORT_SCHEMA}")
    results = tuple(
        TaskResult(**{**r, "calls": tuple(r["calls"]), "steps": tuple(r.get("steps", ()))})
        for r in data["results"]
    )
    return ToolsReport(
        source=data["source"],
        models=tuple(data["models"]),
        strategies={s["name"]: s["fixed"] for s in data["strategies"]},
        results=results,
        cells=tuple(Cell(**c) for c in data["cells"]),
        wall_s=float(data["wall_s"]),
        meta=data.get("meta", {}),
    )


def render_table(report: ToolsReport) -> str:
    """The cells as a plain-text table (rich), one row per strategy × model × family;
    ``halted``: runs with no call and no answer, ``idle``: model calls that executed
    nothing (agent rows)."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"tool calling: {report.source}")
    for column in (
        "strategy",
        "model",
        "family",
        "n",
        "success",
        "95 % CI",
        "calls/task",
        "tok in",
        "tok out",
        "s/task",
        "halted",
        "idle",
    ):
        table.add_column(
            column, justify="left" if column in ("strategy", "model", "family") else "right"
        )
    for c in report.cells:
        table.add_row(
            c.strategy,
            c.model,
            c.family,
            str(c.n),
            f"{100 * c.rate:.1f} %",
            f"{100 * c.low:.1f}–{100 * c.high:.1f}",
            f"{c.model_calls:.2f}",
            f"{c.tokens_in:.0f}",
            f"{c.tokens_out:.0f}",
            f"{c.wall_s:.2f}",
            str(c.halted_no_answer),
            "–" if c.idle_calls is None else str(c.idle_calls),
            end_section=c.family == ALL,
        )
    buffer = io.StringIO()
    Console(width=140, file=buffer, color_system=None).print(table)
    return buffer.getvalue()


def fixed_frontier(cells: Sequence[Cell], fixed: Mapping[str, bool], cost: str) -> list[Cell]:
    """The fixed-setting cells (over all families) that no other fixed cell beats on both
    success and ``cost`` (``tokens`` or ``wall_s``), cheapest first."""
    points = [c for c in cells if c.family == ALL and fixed.get(c.strategy, False)]
    points.sort(key=lambda c: (_cost(c, cost), -c.rate))
    frontier: list[Cell] = []
    for c in points:
        if not frontier or c.rate > frontier[-1].rate:
            frontier.append(c)
    return frontier


def _cost(cell: Cell, cost: str) -> float:
    if cost == "tokens":
        return cell.tokens
    if cost == "wall_s":
        return cell.wall_s
    raise ValueError(f"cost={cost!r}: must be 'tokens' or 'wall_s'")


def plot_plane(report: ToolsReport, path: str | Path, *, cost: str = "tokens") -> Path:
    """Draw the success–cost plane (PNG): a point per strategy × model with its interval,
    and the frontier of fixed settings."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = [c for c in report.cells if c.family == ALL]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for c in cells:
        x, y = _cost(c, cost), 100 * c.rate
        marker = "o" if report.strategies.get(c.strategy, False) else "*"
        ax.errorbar(
            x,
            y,
            yerr=[[y - 100 * c.low], [100 * c.high - y]],
            fmt=marker,
            capsize=3,
            markersize=8 if marker == "o" else 13,
            label=f"{c.strategy} · {c.model}",
        )
    frontier = fixed_frontier(report.cells, report.strategies, cost)
    if frontier:
        xs = [_cost(c, cost) for c in frontier]
        ys = [100 * c.rate for c in frontier]
        ax.step(xs, ys, where="post", color="grey", linestyle="--", label="fixed-setting frontier")
    ax.set_xlabel("mean tokens per task" if cost == "tokens" else "mean wall seconds per task")
    ax.set_ylabel("success % (95 % Wilson interval)")
    ax.set_ylim(-2, 102)
    ax.set_title(f"success–cost plane: {report.source}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
