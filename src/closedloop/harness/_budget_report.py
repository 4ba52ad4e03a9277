"""What ``bench refine --budget`` prints and plots: pass rate against cost per policy, and
the allocator's rounds against each problem's error trend."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from ._curves import Unit, cost_curve
from ._plots import pyplot, save_figure

if TYPE_CHECKING:
    from ._bench_budget import BudgetReport

__all__ = ["error_trends", "plot_allocation", "plot_cost_curves", "render_budget_report"]


def plot_cost_curves(report: BudgetReport, out: Path) -> Path:
    """``pass_rate_vs_cost.png``: solved share (with its Wilson band) against cumulative
    tokens and against cumulative generations, one curve per policy."""
    plt = pyplot()
    fig, (by_tokens, by_gens) = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for name, run in report.runs.items():
        n = max(1, len(run.results))
        # Round 1 is the same for every policy: the curves start where it ends.
        curve = cost_curve(run)[n - 1 :]
        share = [p.solved / n for p in curve]
        low = [p.solved_low for p in curve]
        high = [p.solved_high for p in curve]
        for ax, xs in (
            (by_tokens, [p.tokens for p in curve]),
            (by_gens, [p.generations for p in curve]),
        ):
            (line,) = ax.step(xs, share, where="post", label=name)
            ax.fill_between(xs, low, high, step="post", alpha=0.08, color=line.get_color())
    by_tokens.set_xlabel("cumulative tokens (prompt + completion)")
    by_gens.set_xlabel("cumulative generations")
    by_tokens.set_ylabel("share solved (returned program), after round 1")
    for ax in (by_tokens, by_gens):
        ax.grid(alpha=0.3)
    by_gens.legend(fontsize=8, loc="lower right")
    cfg = report.config
    mode = ", cache-only replay" if cfg.cache_only else ""
    fig.suptitle(f"{len(report.tasks)} {cfg.tasks} tasks, budget {cfg.budget().describe()}{mode}")
    return save_figure(fig, out / "pass_rate_vs_cost.png")


def error_trends(report: BudgetReport, policy: str) -> list[tuple[str, float, int]]:
    """(problem, mean fall of V per round after round 1, rounds given) for ``policy``."""
    run = report.runs[policy]
    out: list[tuple[str, float, int]] = []
    for r in run.results:
        Vs = [
            0.5 * max(0.0, r.target - max(x.score or 0.0 for x in r.rounds[: k + 1])) ** 2
            for k in range(len(r.rounds))
        ]
        trend = (Vs[-1] - Vs[0]) / (len(Vs) - 1) if len(Vs) > 1 else 0.0
        out.append((r.task, trend, len(r.rounds)))
    return out


def plot_allocation(report: BudgetReport, out: Path) -> Path:
    """``allocation.png``: for each allocator (and resample-until-pass, for contrast),
    rounds given to a problem against the trend of its error (mean change of ``V`` per
    round; negative: falling)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4.2))
    names = [n for n in report.runs if n.startswith("allocator")] or list(report.runs)[-1:]
    # For contrast, the baseline that spreads leftover rounds without reading the error.
    names += [n for n in report.runs if n.startswith("resample_until_pass")][:1]
    for name in names:
        trends = error_trends(report, name)
        ax.scatter(
            [t for _, t, _ in trends], [k for _, _, k in trends], s=14, alpha=0.6, label=name
        )
    ax.set_xlabel("error trend: mean change of V = ½(1 − best)² per round")
    ax.set_ylabel("generations given")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return save_figure(fig, out / "allocation.png")


def render_budget_report(report: BudgetReport, console: Console) -> None:
    """The tables ``closedloop bench refine --budget`` prints."""
    cfg = report.config
    console.print(
        f"[bold]bench refine --budget[/]: {len(report.tasks)} {cfg.tasks_label()} task(s), model "
        f"{cfg.model}, budget {cfg.budget().describe()}"
        f"{' (cache-only replay)' if cfg.cache_only else ''}; {report.evaluator_calls} "
        f"programs tested; wall time {report.wall_s:.1f} s"
    )
    table = Table(title="each policy at the same total (returned = best program so far)")
    for col in (
        "policy",
        "solved",
        "95 % interval",
        "pass rate",
        "generations",
        "tokens",
        "cached",
        "not in cache",
        "regressed returned",
    ):
        table.add_column(col, justify="left" if col == "policy" else "right")
    for run in report.runs.values():
        s = report.summary(run)
        low, high = s["solved_interval"] or (0.0, 0.0)
        table.add_row(
            s["policy"],
            f"{s['solved']}/{s['problems']}",
            f"{100 * low:.1f}–{100 * high:.1f} %",
            "-" if s["pass_rate"] is None else f"{s['pass_rate']:.3f}",
            str(s["generations"]),
            str(s["tokens"]),
            str(s["cached"]),
            str(s["misses"]),
            str(s["returned_regressed"]),
        )
    console.print(table)
    missed = sum(run.misses for run in report.runs.values())
    if missed:
        console.print(
            f"{missed} generation(s) were not in the cache: each is a failed round here, so "
            "a policy with misses is read at a lower bound; the same command without "
            "--cache-only (and with the same --cache) makes them."
        )
    units: tuple[Unit, ...] = ("generations", "tokens")
    for unit in units:
        for c in report.comparisons(unit):
            console.print(
                f"at {c['cost']:.0f} {unit}: {c['a']} − {c['b']} = {c['points']:+.1f} points "
                f"solved [{c['low']:+.1f}, {c['high']:+.1f}] (paired; {c['only_a']} only "
                f"{c['a']}, {c['only_b']} only {c['b']})"
            )
