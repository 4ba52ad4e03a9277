"""``closedloop demo``: the world under the seed000 faults, the embedded model, about twenty
tasks run open loop and closed loop, a comparison table, and the run's files.

Writes ``<out>/<id>/report.json`` (every episode and the summaries), ``trace.jsonl`` (every
step record of the closed-loop runs, in task order) and ``control.png`` (e(t), u(t),
f_est(t) and the protocol of the most eventful closed-loop run).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from closedloop._exceptions import ConfigurationError
from closedloop._validation import require_int_at_least
from closedloop.agent import MemoryTrace, RunResult, StepRecord, plot_run
from closedloop.agent._trace import to_json_text

from ..reference import ReferenceTask, load_tasks
from ._faults import summarise_cells
from ._report import CellSummary, EpisodeResult, write_json
from ._runner import EpisodeJob, FaultsConfig, make_runner, run_jobs

__all__ = ["DemoConfig", "DemoReport", "pick_demo_tasks", "render_demo", "run_agent_demo"]

DEMO_STRATEGIES = ("open_loop", "closedloop_adrc")


@dataclass(frozen=True, slots=True, kw_only=True)
class DemoConfig:
    """What ``closedloop demo`` runs (the CLI's options).

    Tasks of at most ``max_steps`` ideal calls, and ``step_slack`` steps beyond them: the
    embedded model answers one call at a time, so the demo keeps its calls few.
    """

    tasks: int = 20
    model: str = "local:qwen2.5-coder-0.5b"
    profile: str = "seed000"
    out: Path = Path("runs")
    seed: int = 0
    max_steps: int = 2
    step_slack: int = 1
    latency_scale: float = 1.0
    concurrency: int = 8
    tool_timeout_s: float | None = 10.0
    closed_loop: str = "auto"
    cache: bool | str = True

    def __post_init__(self) -> None:
        require_int_at_least("tasks", self.tasks, 1)
        require_int_at_least("max_steps", self.max_steps, 1)


class DemoReport(BaseModel):
    """What the demo measured, and where it wrote its files."""

    model_config = ConfigDict(frozen=True)
    run_id: str
    model: dict[str, object]
    profile: str
    tasks: list[str]
    wall_s: float
    episodes: list[EpisodeResult]
    summary: list[CellSummary]
    files: dict[str, str] = Field(default_factory=dict)


def pick_demo_tasks(count: int, *, max_steps: int = 2, seed: int = 0) -> list[ReferenceTask]:
    """``count`` short tasks of the development split, drawn in a seeded order, the four
    domains taking turns."""
    pool = [t for t in load_tasks("dev", seed) if t.expected_steps <= max_steps]
    random.Random(f"demo:{seed}").shuffle(pool)
    by_domain: dict[str, list[ReferenceTask]] = {}
    for task in pool:
        by_domain.setdefault(task.domain, []).append(task)
    picked: list[ReferenceTask] = []
    while len(picked) < count and any(by_domain.values()):
        for queue in by_domain.values():
            if queue and len(picked) < count:
                picked.append(queue.pop(0))
    if len(picked) < count:
        raise ConfigurationError("tasks", count, f"only {len(picked)} short tasks exist")
    return picked


def _eventful(runs: Sequence[RunResult]) -> RunResult | None:
    """The run worth plotting: most protocol changes, then most steps."""
    if not runs:
        return None
    return max(runs, key=lambda r: (len({s.protocol for s in r.steps}), len(r.steps)))


async def run_agent_demo(
    config: DemoConfig,
    *,
    console: Console | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> DemoReport:
    """Run the demo; draw a progress bar on ``console`` (or call ``progress(done, total)``)."""
    started = time.perf_counter()
    tasks = pick_demo_tasks(config.tasks, max_steps=config.max_steps, seed=config.seed)
    bench = FaultsConfig(
        model=config.model,
        strategies=DEMO_STRATEGIES,
        profiles=(config.profile,),
        split="dev",
        world_seed=config.seed,
        seed=config.seed,
        latency_scale=config.latency_scale,
        concurrency=config.concurrency,
        step_slack=config.step_slack,
        tool_timeout_s=config.tool_timeout_s,
        closed_loop=config.closed_loop,
        cache=config.cache,
        command="closedloop demo",
    )
    traces: dict[EpisodeJob, MemoryTrace] = {}

    def trace_for(job: EpisodeJob) -> MemoryTrace | None:
        if job.strategy == "open_loop":
            return None
        traces[job] = MemoryTrace()
        return traces[job]

    run_id = time.strftime("demo-%Y%m%d-%H%M%S")
    jobs = [
        EpisodeJob(config.profile, t.expected_steps, t.id, 0, config.seed * 1_000_003 + n, name)
        for n, t in enumerate(tasks)
        for name in DEMO_STRATEGIES
    ]
    bar = (
        None
        if console is None
        else Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
        )
    )
    done = 0

    def tick(_result: EpisodeResult) -> None:
        nonlocal done
        done += 1
        if bar is not None:
            bar.update(bar_task, completed=done)
        if progress is not None:
            progress(done, len(jobs))

    runner = make_runner(bench, traces=trace_for, on_result=tick)
    bar_task = TaskID(0)
    if bar is not None:
        bar.start()
        bar_task = bar.add_task(f"{len(tasks)} tasks × open and closed loop", total=len(jobs))
    try:
        rows = await run_jobs(bench, jobs, runner)
    finally:
        if bar is not None:
            bar.stop()
    folder = config.out / run_id
    folder.mkdir(parents=True, exist_ok=True)
    files = _write_traces(folder, jobs, traces)
    report = DemoReport(
        run_id=run_id,
        model=runner.source.describe(),
        profile=config.profile,
        tasks=[t.id for t in tasks],
        wall_s=time.perf_counter() - started,
        episodes=rows,
        summary=[c for c in summarise_cells(rows) if c.steps == 0],
        files=files,
    )
    report = report.model_copy(update={"files": {**files, "report": str(folder / "report.json")}})
    write_json(report, folder / "report.json")
    return report


def _write_traces(
    folder: Path, jobs: Sequence[EpisodeJob], traces: dict[EpisodeJob, MemoryTrace]
) -> dict[str, str]:
    records: list[StepRecord] = []
    runs: list[RunResult] = []
    for job in jobs:
        trace = traces.get(job)
        if trace is None:
            continue
        records.extend(trace.records)
        if trace.result is not None:
            runs.append(trace.result)
    path = folder / "trace.jsonl"
    with open(path, "w", encoding="utf-8") as out:
        for record in records:
            out.write(to_json_text(record) + "\n")
    files = {"trace": str(path)}
    chosen = _eventful([r for r in runs if r.steps])
    if chosen is not None:
        plot = plot_run(chosen.steps, folder / "control.png")
        files["control_plot"] = str(plot)
    return files


def render_demo(report: DemoReport, console: Console) -> None:
    """The comparison table and where the files are."""
    table = Table(
        title=f"closedloop demo: {len(report.tasks)} tasks, profile {report.profile}, "
        f"model {report.model['spec']}"
    )
    for col in (
        "strategy",
        "success",
        "steps",
        "model calls",
        "tokens",
        "p95 latency s",
        "handovers",
    ):
        table.add_column(col, justify="left" if col == "strategy" else "right")
    for cell in report.summary:
        mine = [e for e in report.episodes if e.strategy == cell.strategy]
        steps = sum(e.loop_steps for e in mine) / len(mine) if mine else 0.0
        p95 = "—" if cell.latency_p95_s is None else f"{cell.latency_p95_s:.2f}"
        table.add_row(
            "open loop" if cell.strategy == "open_loop" else "closed loop (PID+ADRC)",
            f"{cell.successes}/{cell.episodes} ({100 * cell.success:.0f} %)",
            f"{steps:.1f}",
            f"{cell.model_calls:.1f}",
            f"{cell.tokens:.0f}",
            p95,
            f"{cell.handovers} ({cell.handovers_justified} justified)",
        )
    console.print(table)
    for name, path in report.files.items():
        console.print(f"{name}: {path}", highlight=False)
    console.print(f"real time: {report.wall_s:.1f} s", highlight=False)


def run_demo_sync(config: DemoConfig, console: Console) -> DemoReport:
    """The demo from sync code (the CLI)."""
    return asyncio.run(run_agent_demo(config, console=console))
