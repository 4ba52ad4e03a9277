"""The faults benchmark's report: per-episode rows, per-cell summaries, targets and the
published claims, as JSON (pydantic), a rich table and a PNG of the success curves."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator
from rich.console import Console
from rich.table import Table

from ._stats import percentile, rate
from ._verdicts import bounded_verdict

__all__ = [
    "REPORT_SCHEMA_VERSION",
    "CellSummary",
    "ClaimBaseline",
    "ClaimCheck",
    "EpisodeResult",
    "FaultsReport",
    "LambdaCurve",
    "LambdaPoint",
    "OnVsFrozen",
    "TargetCheck",
    "plot_curves",
    "render_claims",
    "render_faults",
    "render_lambda",
    "render_on_vs_frozen",
    "summarise",
    "write_json",
]

REPORT_SCHEMA_VERSION = 1


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class EpisodeResult(_Frozen):
    """One strategy on one task, seed and world, judged by the task's checker."""

    strategy: str
    profile: str
    steps: int = Field(description="the task's expected (ideal) number of tool calls")
    task_id: str
    domain: str
    template: str
    impossible: bool
    repetition: int
    fault_seed: int
    success: bool
    reason: str
    halt: str
    loop_steps: int
    handed_over: bool
    handover_justified: bool | None = None
    oracle_solvable: bool
    model_calls: int
    prompt_tokens: int
    completion_tokens: int
    latency_s: float = Field(description="wall time less waiting for the shared model")
    wall_s: float
    requests: int
    faults: dict[str, int] = Field(default_factory=dict)
    duplicate_effects: int = 0
    warned_early: bool = False
    regime_changes: list[dict[str, Any]] = Field(
        default_factory=list,
        description="ground truth of a profile with regimes: service, index, t_s, from, to",
    )
    planner: str = Field(
        default="model",
        description="who proposed the steps: model (every step), react or reference",
    )
    error: str | None = None


class CellSummary(_Frozen):
    """Episodes of one strategy under one profile, at one step count (``steps`` 0: all)."""

    strategy: str
    profile: str
    steps: int
    episodes: int
    successes: int
    success: float
    ci_low: float
    ci_high: float
    oracle: float
    oracle_ci_low: float
    oracle_ci_high: float
    model_calls: float
    tokens: float
    latency_p50_s: float | None
    latency_p95_s: float | None
    handovers: int
    handovers_justified: int
    duplicate_effects: int
    failures_warned_early: int
    failures: int


class TargetCheck(_Frozen):
    """One of the issue's targets: what it asks, what was measured, whether it holds."""

    target: str
    measured: float | None
    threshold: float
    met: bool | None
    note: str = ""


class ClaimBaseline(_Frozen):
    """A published claim judged against one baseline: the controlled strategy's success
    minus the baseline's on the same episodes, with its 95 % interval (Newcombe's hybrid
    score interval), and a verdict: confirmed, refuted, qualified, inconclusive (the
    interval spans 0), not applicable, or not run."""

    baseline: str
    role: str = Field(description="what the baseline stands for in the comparison")
    treated: str
    cell: str = Field(description="the episodes compared, e.g. 1-step tasks")
    treated_success: float | None = None
    treated_episodes: int = 0
    baseline_success: float | None = None
    baseline_ci_low: float | None = None
    baseline_ci_high: float | None = None
    baseline_episodes: int = 0
    difference: float | None = Field(default=None, description="treated minus baseline")
    ci_low: float | None = None
    ci_high: float | None = None
    verdict: str
    note: str = ""


class ClaimCheck(_Frozen):
    """A published claim next to what this run measured.

    ``verdict`` is the article's own framing (point estimates against the open loop);
    ``baselines`` judges the claim like for like: against the open loop, tenacity on the
    same retry predicate and the same loop with the controller frozen, each with the
    difference and its 95 % interval. ``command`` reproduces the comparison.
    """

    claim: str
    seed_value: str
    measured: str
    verdict: str
    baselines: list[ClaimBaseline] = Field(default_factory=list)
    command: str = ""

    @model_validator(mode="before")
    @classmethod
    def _within_rows(cls, data: Any) -> Any:
        # Also on load: a report written before the rule reads back bounded by its rows.
        if not isinstance(data, dict) or not isinstance(data.get("verdict"), str):
            return data
        rows = data.get("baselines") or []
        verdicts = [r["verdict"] if isinstance(r, dict) else r.verdict for r in rows]
        return {**data, "verdict": bounded_verdict(data["verdict"], verdicts)}


class OnVsFrozen(_Frozen):
    """A controller-on strategy against its frozen counterpart (same loop, actuators at
    u = 0.5) under one profile, over all step counts: success difference with its 95 %
    interval, and the cost differences (mean requests and latency per episode)."""

    profile: str
    strategy: str
    frozen: str
    differs: str = Field(default="", description="what differs besides the controller")
    episodes: int
    frozen_episodes: int
    success: float
    frozen_success: float
    difference: float
    ci_low: float
    ci_high: float
    requests: float
    frozen_requests: float
    requests_difference: float
    latency_s: float
    frozen_latency_s: float
    latency_difference_s: float


class LambdaPoint(_Frozen):
    """One strategy at one onset rate λ: success with its 95 % interval, and mean cost."""

    episodes: int
    success: float
    ci_low: float
    ci_high: float
    requests: float
    latency_s: float


class LambdaCurve(_Frozen):
    """Success against the regimes' onset rate λ for the profiles ``base@λ`` of a run:
    ``points[strategy][λ]`` (λ written as in the profile name, e.g. ``"0.2"``)."""

    base: str
    lambdas: list[float]
    points: dict[str, dict[str, LambdaPoint]]


class FaultsReport(_Frozen):
    """Everything a faults benchmark run measured (``schema_version`` 1)."""

    schema_version: int = REPORT_SCHEMA_VERSION
    command: str
    config: dict[str, Any]
    model: dict[str, Any]
    wall_s: float
    episodes: list[EpisodeResult]
    cells: list[CellSummary]
    targets: list[TargetCheck] = Field(default_factory=list)
    claims: list[ClaimCheck] = Field(default_factory=list)
    on_vs_frozen: list[OnVsFrozen] = Field(default_factory=list)
    lambda_curves: list[LambdaCurve] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def summarise(
    rows: Sequence[EpisodeResult], strategy: str, profile: str, steps: int
) -> CellSummary:
    """The summary of ``rows`` (already filtered to one cell)."""
    wins = sum(r.success for r in rows)
    solvable = sum(r.oracle_solvable for r in rows)
    ok, bound = rate(wins, len(rows)), rate(solvable, len(rows))
    latencies = [r.latency_s for r in rows]
    failures = [r for r in rows if not r.success]
    return CellSummary(
        strategy=strategy,
        profile=profile,
        steps=steps,
        episodes=len(rows),
        successes=wins,
        success=ok.value,
        ci_low=ok.low,
        ci_high=ok.high,
        oracle=bound.value,
        oracle_ci_low=bound.low,
        oracle_ci_high=bound.high,
        model_calls=_mean([r.model_calls for r in rows]),
        tokens=_mean([r.prompt_tokens + r.completion_tokens for r in rows]),
        latency_p50_s=percentile(latencies, 50),
        latency_p95_s=percentile(latencies, 95),
        handovers=sum(r.handed_over for r in rows),
        handovers_justified=sum(bool(r.handover_justified) for r in rows),
        duplicate_effects=sum(r.duplicate_effects for r in rows),
        failures_warned_early=sum(r.warned_early for r in failures),
        failures=len(failures),
    )


def write_json(report: FaultsReport | BaseModel, path: Path) -> Path:
    """Write ``report`` as indented JSON, atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(report.model_dump(mode="json"), indent=2, ensure_ascii=False)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text + "\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _pct(value: float) -> str:
    return f"{100 * value:.1f}"


def _seconds(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def render_faults(report: FaultsReport, console: Console) -> None:
    """The overall table per profile, the curve table, the targets and the claims."""
    profiles = list(dict.fromkeys(c.profile for c in report.cells))
    for profile in profiles:
        overall = [c for c in report.cells if c.profile == profile and c.steps == 0]
        table = Table(title=f"faults benchmark: profile {profile}, model {report.model['spec']}")
        for col in (
            "strategy",
            "episodes",
            "success % [95 % CI]",
            "oracle %",
            "model calls",
            "tokens",
            "latency p50 s",
            "p95 s",
            "handovers (justified)",
            "dup. effects",
        ):
            table.add_column(col, justify="left" if col == "strategy" else "right")
        for c in overall:
            table.add_row(
                c.strategy,
                str(c.episodes),
                f"{_pct(c.success)} [{_pct(c.ci_low)}, {_pct(c.ci_high)}]",
                _pct(c.oracle),
                f"{c.model_calls:.2f}",
                f"{c.tokens:.0f}",
                _seconds(c.latency_p50_s),
                _seconds(c.latency_p95_s),
                f"{c.handovers} ({c.handovers_justified})",
                str(c.duplicate_effects),
            )
        console.print(table)
        by_steps = [c for c in report.cells if c.profile == profile and c.steps > 0]
        steps = sorted({c.steps for c in by_steps})
        strategies = list(dict.fromkeys(c.strategy for c in by_steps))
        curve = Table(title=f"success % by number of steps ({profile})")
        curve.add_column("strategy")
        for s in steps:
            curve.add_column(str(s), justify="right")
        for name in strategies:
            row = {c.steps: c for c in by_steps if c.strategy == name}
            curve.add_row(name, *(_pct(row[s].success) if s in row else "—" for s in steps))
        oracle = {c.steps: c.oracle for c in by_steps if c.strategy == strategies[0]}
        curve.add_row("oracle bound", *(_pct(oracle[s]) if s in oracle else "—" for s in steps))
        console.print(curve)
    if report.targets:
        table = Table(title="targets (closedloop PID+ADRC)")
        for col in ("target", "measured", "threshold", "met"):
            table.add_column(col)
        for t in report.targets:
            measured = "—" if t.measured is None else f"{t.measured:.3f}"
            met = "n/a" if t.met is None else ("yes" if t.met else "NO")
            table.add_row(t.target, measured, f"{t.threshold:.3f}", met)
        console.print(table)
    if report.claims:
        render_claims(report.claims, console)
    if report.on_vs_frozen:
        render_on_vs_frozen(report.on_vs_frozen, console)
    for swept in report.lambda_curves:
        render_lambda(swept, console)
    for note in report.notes:
        console.print(f"- {note}", highlight=False)
    console.print(f"wall time: {report.wall_s:.1f} s", highlight=False)


def _points(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:+.1f}"


def _interval(low: float | None, high: float | None) -> str:
    return "—" if low is None or high is None else f"[{100 * low:+.1f}, {100 * high:+.1f}]"


def render_claims(claims: Sequence[ClaimCheck], console: Console) -> None:
    """The claims table: each claim with the article's verdict, then one row per
    baseline (success, the difference in points with its 95 % interval, the verdict);
    below it, the command that reruns each claim."""
    table = Table(title="the published claims, judged like for like")
    for col in (
        "claim / baseline",
        "published / role",
        "success % base -> treated",
        "difference, points [95 % CI]",
        "verdict",
    ):
        table.add_column(col)
    for n, claim in enumerate(claims, start=1):
        row = (f"{n}. {claim.claim}", claim.seed_value, claim.measured, "", claim.verdict)
        table.add_row(*row, style="bold")
        for b in claim.baselines:
            success = (
                "—"
                if b.baseline_success is None or b.treated_success is None
                else f"{_pct(b.baseline_success)} -> {_pct(b.treated_success)} "
                f"(n={b.baseline_episodes}, {b.treated_episodes})"
            )
            table.add_row(
                f"  vs {b.baseline}",
                b.role,
                success,
                f"{_points(b.difference)} {_interval(b.ci_low, b.ci_high)}".strip(),
                b.verdict + (f"; {b.note}" if b.note else ""),
            )
        table.add_section()
    console.print(table)
    for n, claim in enumerate(claims, start=1):
        if claim.command:  # one line each, so the command can be copied whole
            console.print(f"rerun claim {n}: {claim.command}", soft_wrap=True, highlight=False)


def render_on_vs_frozen(pairs: Sequence[OnVsFrozen], console: Console) -> None:
    """Controller on against frozen, per profile: success and cost differences."""
    table = Table(title="controller on vs frozen (same loop, actuators at u = 0.5)")
    for col in (
        "profile",
        "strategy",
        "frozen",
        "n",
        "success % on / frozen",
        "difference, points [95 % CI]",
        "requests on / frozen (diff)",
        "latency s on / frozen (diff)",
        "differs also in",
    ):
        table.add_column(col, justify="left" if col in ("profile", "strategy") else "right")
    for p in pairs:
        table.add_row(
            p.profile,
            p.strategy,
            p.frozen,
            f"{p.episodes}/{p.frozen_episodes}",
            f"{_pct(p.success)} / {_pct(p.frozen_success)}",
            f"{_points(p.difference)} {_interval(p.ci_low, p.ci_high)}",
            f"{p.requests:.2f} / {p.frozen_requests:.2f} ({p.requests_difference:+.2f})",
            f"{p.latency_s:.2f} / {p.frozen_latency_s:.2f} ({p.latency_difference_s:+.2f})",
            p.differs or "—",
        )
    console.print(table)


def render_lambda(curve: LambdaCurve, console: Console) -> None:
    """Success % [95 % CI] per strategy against the onset rate λ of one base profile."""
    table = Table(title=f"success % [95 % CI] against λ ({curve.base}@λ)")
    table.add_column("strategy")
    keys = [f"{lam:g}" for lam in curve.lambdas]
    for key in keys:
        table.add_column(f"λ = {key}", justify="right")
    for name, by_lambda in curve.points.items():
        cells = []
        for key in keys:
            p = by_lambda.get(key)
            cells.append(
                "—" if p is None else f"{_pct(p.success)} [{_pct(p.ci_low)}, {_pct(p.ci_high)}]"
            )
        table.add_row(name, *cells)
    console.print(table)


def plot_curves(cells: Iterable[CellSummary], path: Path, *, title: str = "") -> Path:
    """Success rate against the number of steps, one line per strategy with its 95 %
    interval, and the oracle bound dashed; one panel per profile."""
    from matplotlib.figure import Figure

    rows = [c for c in cells if c.steps > 0]
    profiles = list(dict.fromkeys(c.profile for c in rows)) or ["none"]
    figure = Figure(figsize=(6.5 * len(profiles), 4.8), layout="constrained")
    axes = figure.subplots(1, len(profiles), squeeze=False)[0]
    for ax, profile in zip(axes, profiles, strict=True):
        mine = [c for c in rows if c.profile == profile]
        strategies = list(dict.fromkeys(c.strategy for c in mine))
        for i, name in enumerate(strategies):
            line = sorted((c for c in mine if c.strategy == name), key=lambda c: c.steps)
            # A small sideways shift per strategy: equal curves stay visible side by side.
            shift = (i - (len(strategies) - 1) / 2) * 0.08
            x = [c.steps + shift for c in line]
            y = [100 * c.success for c in line]
            low = [100 * (c.success - c.ci_low) for c in line]
            high = [100 * (c.ci_high - c.success) for c in line]
            ax.errorbar(x, y, yerr=[low, high], marker="o", markersize=3, capsize=2, label=name)
        if strategies:
            ref = sorted((c for c in mine if c.strategy == strategies[0]), key=lambda c: c.steps)
            ax.plot(
                [c.steps for c in ref],
                [100 * c.oracle for c in ref],
                linestyle="--",
                color="black",
                linewidth=1.2,
                label="oracle bound",
                zorder=5,
            )
        ax.axhline(60, color="grey", linestyle=":", linewidth=0.8)
        ax.set_ylim(-3, 103)
        ax.set_xlabel("steps (ideal tool calls)")
        ax.set_ylabel("success % (95 % Wilson interval)")
        ax.set_title(f"profile {profile}", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower left")
    if title:
        figure.suptitle(title, fontsize=11)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png", dpi=110)
    return path
