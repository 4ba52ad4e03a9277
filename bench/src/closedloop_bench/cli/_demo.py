"""``closedloop demo``: the main job, on the embedded defaults.

``closedloop demo`` (or ``closedloop demo agents``) runs the same model, tools and prompts
with the loop open, closed and with the controller frozen, on tool-calling tasks and on
the faulted world, side by side (the rules-first reference agents as a row of their own);
``closedloop demo control`` shows the controllers' step responses.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from closedloop.control._scenarios import ScenarioResult, reference_scenarios, run_scenario

app = typer.Typer(
    help="Demonstrations of the control loop (no subcommand: the agent demo).",
    invoke_without_command=True,
    no_args_is_help=False,
)
# Tables are wide; a pipe or CI log would otherwise fold them to 80 columns.
_out = Console(width=None if Console().is_terminal else 200)

TasksOption = Annotated[int, typer.Option(help="World tasks (each run in every row).")]
ToolTasksOption = Annotated[
    int, typer.Option(help="Tool-calling tasks of the dev split (each run in every row; 0: none).")
]
ThreadsOption = Annotated[
    int | None, typer.Option(help="Threads for a local model (1 is fastest on loaded cores).")
]
ResultsOption = Annotated[
    Path | None,
    typer.Option(
        help="Also write the report JSON here (make bench-demo: bench/results/demo.json)."
    ),
]
ModelOption = Annotated[
    str, typer.Option(help="Model spec (test:oracle: the deterministic test model).")
]
ProfileOption = Annotated[str, typer.Option(help="World fault profile (name or file).")]
OutOption = Annotated[Path, typer.Option(help="Folder under which the run folder is made.")]
ConcurrencyOption = Annotated[int, typer.Option(help="Episodes in flight at once.")]
LatencyOption = Annotated[float, typer.Option(help="Multiplies the world's injected latency.")]
NoCacheOption = Annotated[
    bool, typer.Option("--no-cache", help="Do not use the completion cache (a cold run).")
]
TimeoutOption = Annotated[
    float, typer.Option(help="Timeout of every HTTP call, s; 0: the tools' adaptive timeout.")
]


def _agents(
    tasks: int,
    model: str,
    profile: str,
    out: Path,
    concurrency: int,
    latency_scale: float,
    tool_timeout: float,
    no_cache: bool,
    tool_tasks: int,
    threads: int | None,
    results: Path | None,
) -> None:
    from ..benchmarks import DemoConfig, render_demo, run_demo_sync

    config = DemoConfig(
        tasks=tasks,
        tool_tasks=tool_tasks,
        threads=threads,
        results=results,
        model=model,
        profile=profile,
        out=out,
        concurrency=concurrency,
        latency_scale=latency_scale,
        tool_timeout_s=tool_timeout or None,
        cache=not no_cache,
    )
    _out.print(
        f"closedloop demo: model {model}; {tool_tasks} tool-calling tasks and {tasks} world "
        f"tasks (profile {profile}), each with the loop open, closed and frozen",
        highlight=False,
    )
    render_demo(run_demo_sync(config, _out), _out)


@app.callback()
def demo(
    ctx: typer.Context,
    tasks: TasksOption = 2,
    model: ModelOption = "local:qwen2.5-coder-0.5b",
    profile: ProfileOption = "seed000",
    out: OutOption = Path("runs"),
    concurrency: ConcurrencyOption = 8,
    latency_scale: LatencyOption = 1.0,
    tool_timeout: TimeoutOption = 10.0,
    no_cache: NoCacheOption = False,
    tool_tasks: ToolTasksOption = 5,
    threads: ThreadsOption = None,
    results: ResultsOption = None,
) -> None:
    """The agent demo: the loop open, closed and frozen, on tool-calling and world tasks."""
    if ctx.invoked_subcommand is None:
        _agents(
            tasks, model, profile, out, concurrency, latency_scale, tool_timeout, no_cache,
            tool_tasks, threads, results,
        )  # fmt: skip


@app.command("agents")
def agents(
    tasks: TasksOption = 2,
    model: ModelOption = "local:qwen2.5-coder-0.5b",
    profile: ProfileOption = "seed000",
    out: OutOption = Path("runs"),
    concurrency: ConcurrencyOption = 8,
    latency_scale: LatencyOption = 1.0,
    tool_timeout: TimeoutOption = 10.0,
    no_cache: NoCacheOption = False,
    tool_tasks: ToolTasksOption = 5,
    threads: ThreadsOption = None,
    results: ResultsOption = None,
) -> None:
    """The agent demo (the same as closedloop demo with no subcommand)."""
    _agents(
        tasks, model, profile, out, concurrency, latency_scale, tool_timeout, no_cache,
        tool_tasks, threads, results,
    )  # fmt: skip


def _fmt(value: float | None, spec: str) -> str:
    return "—" if value is None else format(value, spec)


def _table(results: list[ScenarioResult]) -> Table:
    table = Table(title="Step responses (unit step, explicit sample time)")
    for col in (
        "scenario",
        "overshoot %",
        "settling 2 % s",
        "rise 10–90 % s",
        "dist. dip",
        "recovery 1e-3 s",
    ):
        table.add_column(col, justify="left" if col == "scenario" else "right")
    for r in results:
        m = r.metrics
        recovery = _fmt(r.recovery_time, ".3f")
        if r.recovered is False:
            recovery = f"> {r.recovery_time:.1f}"
        table.add_row(
            r.scenario.name,
            f"{m.overshoot_pct:.2f}",
            f"{m.settling_time:.3f}",
            f"{m.rise_time:.3f}",
            _fmt(r.disturbance_dip, ".4f"),
            recovery,
        )
    return table


def _legend(results: list[ScenarioResult]) -> str:
    return "\n".join(
        f"  {r.scenario.name}: {r.scenario.controller} on {r.scenario.plant}" for r in results
    )


def _plot(results: list[ScenarioResult], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = {
        "PID anti-windup on FOPDT (u ∈ [0, 1.2])": [
            r
            for r in results
            if r.scenario.name.startswith("pid-") and r.scenario.name != "pid-1st"
        ],
        "First order, −0.5 input disturbance at 3 s": [
            r for r in results if r.scenario.name.endswith("1st")
        ],
        "Second order": [r for r in results if r.scenario.name.endswith("2nd")],
    }
    fig, axes = plt.subplots(2, len(groups), figsize=(15, 7), sharex="col")
    for col, (title, members) in enumerate(groups.items()):
        ax_y, ax_u = axes[0][col], axes[1][col]
        for r in members:
            ax_y.plot(r.t, r.y, label=r.scenario.name, linewidth=1.2)
            ax_u.plot(r.t, r.u, label=r.scenario.name, linewidth=1.0)
        ax_y.axhline(1.0, color="grey", linestyle=":", linewidth=0.8)
        ax_y.set_title(title, fontsize=10)
        ax_y.set_ylabel("y(t)")
        ax_u.set_ylabel("u(t)")
        ax_u.set_xlabel("t (s)")
        ax_y.legend(fontsize=8)
        ax_y.grid(alpha=0.3)
        ax_u.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


@app.command("control")
def control(
    out: Annotated[Path, typer.Option(help="Folder under which a run folder is created.")] = Path(
        "runs"
    ),
) -> None:
    """Step responses of PID and ADRC on the reference plants: a table and a PNG plot."""
    started = time.perf_counter()
    results = [run_scenario(s) for s in reference_scenarios()]
    run_dir = out / time.strftime("control-%Y%m%d-%H%M%S")
    run_dir.mkdir(parents=True, exist_ok=True)
    _out.print(_table(results))
    _out.print(_legend(results), highlight=False)
    _plot(results, run_dir / "control.png")
    summary = [
        {
            "scenario": r.scenario.name,
            "controller": r.scenario.controller,
            "plant": r.scenario.plant,
            "overshoot_pct": r.metrics.overshoot_pct,
            "settling_time_s": r.metrics.settling_time,
            "rise_time_s": r.metrics.rise_time,
            "steady_state_error": r.metrics.steady_state_error,
            "disturbance_dip": r.disturbance_dip,
            "recovery_time_s": r.recovery_time,
            "recovered": r.recovered,
        }
        for r in results
    ]
    (run_dir / "report.json").write_text(json.dumps(summary, indent=2, ensure_ascii=False))
    _out.print(
        f"wrote {run_dir / 'control.png'} and {run_dir / 'report.json'} "
        f"in {time.perf_counter() - started:.2f} s"
    )
