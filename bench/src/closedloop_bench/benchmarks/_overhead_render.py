"""The overhead benchmark's report as tables: µs per step, group commit, the profiles and
the targets."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from ._overhead import OverheadReport
from ._overhead_profile import render_profiles

__all__ = ["render_overhead"]


def render_overhead(report: OverheadReport, console: Console) -> None:
    """The table of µs per step and the targets."""
    table = Table(title=f"per-step overhead ({report.steps} steps, floor {report.floor_us:.1f} µs)")
    columns = (
        "loop",
        "µs/step",
        "CPU µs/step",
        "CPU × LangGraph",
        "CPU × LangGraph+SQLite",
        "CPU × LangGraph ReAct",
        "store thread CPU µs",
        "commits/run",
        "commits/step",
        "overhead µs",
        "× LangGraph",
        "% of 10 ms call",
    )
    for col in columns:
        table.add_column(col, justify="left" if col == "loop" else "right")

    def cell(value: float | None, digits: int = 1) -> str:
        return "—" if value is None else f"{value:.{digits}f}"

    for row in report.rows:
        table.add_row(
            row.loop,
            f"{row.per_step_us:.1f}",
            cell(row.cpu_us),
            cell(row.cpu_vs_langgraph, 2),
            cell(row.cpu_vs_langgraph_sqlite, 2),
            cell(row.cpu_vs_langgraph_react, 2),
            cell(row.store_thread_cpu_us),
            cell(row.commits_per_run, 1),
            cell(row.commits_per_step, 2),
            f"{row.overhead_us:.1f}",
            cell(row.vs_langgraph, 2),
            f"{100 * row.share_of_10ms_call:.2f}",
        )
    console.print(table)
    if report.group_commit:
        group = Table(title="group commit: sessions at once on one SQLite file (FULL)")
        for col in ("tool", "sessions", "steps", "commits", "commits/step", "CPU µs/step"):
            group.add_column(col, justify="left" if col == "tool" else "right")
        for g in report.group_commit:
            group.add_row(
                g.effect,
                str(g.sessions),
                str(g.steps),
                f"{g.commits:.0f}",
                f"{g.commits_per_step:.2f}",
                f"{g.cpu_us_per_step:.0f}",
            )
        console.print(group)
    console.print(f"load average {report.load} on {report.cpus} CPUs", highlight=False)
    render_profiles(report.profiles, console)
    for target, met in report.targets.items():
        verdict = "n/a" if met is None else ("met" if met else "NOT met")
        console.print(f"{target}: {verdict}", highlight=False)
    for note in report.notes:
        console.print(f"- {note}", highlight=False)
