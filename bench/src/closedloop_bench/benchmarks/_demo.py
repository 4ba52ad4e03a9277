"""``closedloop demo``: the same model, the same tools and the same prompts with the loop
open, closed and with the controller frozen, side by side, on two suites.

- tool-calling tasks: a fixed spread of the tool-calling benchmark's dev split (the
  families in turn, the domains spread), run ``open_loop`` (one call, no grammar),
  ``closedloop`` and ``frozen`` (:mod:`closedloop_bench.tools`), all with the one shared
  prompt text;
- world tasks: short tasks of the faulted world (seed000 by default), run open loop (the
  model planning freehand), closed loop with the model deciding every step, the same loop
  with every actuator frozen at u = 0.5, and the rules-first reference agents as a row of
  their own (:mod:`._demo_rows`).

Each row gives success (with its 95 % interval) and the cost per task: model calls,
tokens and seconds. Writes ``<out>/<id>/report.json`` (rows, tool results, world episodes
and summaries; also to ``results`` when given), ``trace.jsonl`` (every step record of the
world's closed-loop runs) and ``control.png`` (e(t), u(t), f_est(t) and the protocol of the
most eventful one).
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

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
from closedloop.models import Model

from ..reference import ReferenceTask, load_tasks
from ..world import World
from ._demo_rows import (
    ROW_LABELS,
    TOOL_STRATEGIES,
    WORLD_STRATEGIES,
    DemoRow,
    pick_tool_tasks,
    tool_rows,
    world_rows,
)
from ._faults import summarise_cells
from ._models import model_source
from ._report import CellSummary, EpisodeResult, write_json
from ._runner import EpisodeJob, FaultsConfig, make_runner, run_jobs

if TYPE_CHECKING:  # the tools package imports this package's statistics: import it on use
    from ..tools import ToolsReport, ToolTask

__all__ = ["DemoConfig", "DemoReport", "pick_demo_tasks", "render_demo", "run_agent_demo"]

DEMO_STRATEGIES = tuple(WORLD_STRATEGIES.values())


@dataclass(frozen=True, slots=True, kw_only=True)
class DemoConfig:
    """What ``closedloop demo`` runs (the CLI's options).

    ``tasks`` world tasks of at most ``max_steps`` ideal calls, and ``step_slack`` steps
    beyond them; ``tool_tasks`` tool-calling tasks (0: none). The embedded model answers
    one call at a time, so the demo keeps its calls few. ``threads`` go to a local model
    (1 is fastest on loaded cores); ``results`` is a second path for the report JSON.
    """

    tasks: int = 2
    tool_tasks: int = 5
    threads: int | None = None
    results: Path | None = None
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
        require_int_at_least("tool_tasks", self.tool_tasks, 0)
        require_int_at_least("max_steps", self.max_steps, 1)
        if self.threads is not None:
            require_int_at_least("threads", self.threads, 1)


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
    rows: list[DemoRow] = Field(default_factory=list)
    tool_tasks: list[str] = Field(default_factory=list)
    tool_results: list[dict[str, object]] = Field(default_factory=list)
    files: dict[str, str] = Field(default_factory=dict)
    lead: dict[str, Any] | None = None
    lead_missing: str | None = None


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
    """Run the demo; draw a progress bar on ``console`` (or call ``progress(done, total)``
    for the world episodes)."""
    started = time.perf_counter()
    lead, lead_missing = _lead()
    if console is not None:
        render_lead(lead, lead_missing, console)
    tasks = pick_demo_tasks(config.tasks, max_steps=config.max_steps, seed=config.seed)
    tool_tasks = pick_tool_tasks(config.tool_tasks)
    options = {} if config.threads is None else {"n_threads": config.threads}
    source = model_source(config.model, cache=config.cache, options=options)
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
        # The reference row runs the reference agents; the other closed rows let the model
        # decide every step whatever this says.
        closed_loop="reference",
        cache=config.cache,
        command="closedloop demo",
    )
    traces: dict[EpisodeJob, MemoryTrace] = {}

    def trace_for(job: EpisodeJob, _world: World) -> MemoryTrace | None:
        if job.strategy != WORLD_STRATEGIES["closed"]:
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

    tools_report = await _run_tools(config, tool_tasks, source.shared, console is not None)
    runner = make_runner(bench, source=source, traces=trace_for, on_result=tick)
    bar_task = TaskID(0)
    if bar is not None:
        bar.start()
        bar_task = bar.add_task(
            f"world: {len(tasks)} tasks × {len(DEMO_STRATEGIES)} rows", total=len(jobs)
        )
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
        rows=[*([] if tools_report is None else tool_rows(tools_report)), *world_rows(rows)],
        tool_tasks=[t.id for t in tool_tasks],
        tool_results=[]
        if tools_report is None
        else [dataclasses.asdict(r) for r in tools_report.results],
        files=files,
        lead=lead,
        lead_missing=lead_missing,
    )
    files = {**files, "report": str(folder / "report.json")}
    if config.results is not None:
        files["results"] = str(config.results)
    report = report.model_copy(update={"files": files})
    write_json(report, folder / "report.json")
    if config.results is not None:
        write_json(report, config.results)
    return report


def _lead() -> tuple[dict[str, Any] | None, str | None]:
    """The lead rows replayed from the committed banks, or why there are none."""
    from ..tools._lead import lead_report

    try:
        return lead_report(), None
    except ConfigurationError as exc:
        return None, str(exc)


def render_lead(lead: dict[str, Any] | None, missing: str | None, console: Console) -> None:
    """The lead table: every eval task, replayed from the sample banks."""
    if lead is None:
        console.print(f"lead table skipped: {missing}", highlight=False)
        return
    table = Table(
        title=f"{lead['n']} tool-calling eval tasks, {lead['model']}, replayed from the "
        f"committed sample bank: spend only when unsure (settings {lead['settings_source']})"
    )
    for col in ("strategy", "success", "95 % CI", "calls", "tokens", "s", "vs single: +/−, p"):
        table.add_column(col, justify="left" if col == "strategy" else "right")
    for row in lead["rows"]:
        low, high = row["success_ci"]
        paired = row["vs_reference"]
        versus = (
            "—"
            if paired is None
            else f"+{paired['success']['only_a']} / −{paired['success']['only_b']}, "
            f"p {paired['success']['p']:.3f}"
        )
        table.add_row(
            row["name"],
            f"{row['success']}/{row['n']} ({100 * row['success_rate']:.1f} %)",
            f"{100 * low:.0f}–{100 * high:.0f} %",
            f"{row['mean_calls']:.2f}",
            f"{row['mean_tokens']:.0f}",
            f"{row['mean_seconds']:.1f}",
            versus,
        )
    console.print(table)
    console.print(
        "cost per task; +/−: tasks only this row / only the single call solves (McNemar "
        "exact p); the live run below uses the same model on fewer tasks",
        highlight=False,
    )


async def _run_tools(
    config: DemoConfig, tasks: Sequence[ToolTask], shared: Model | None, progress: bool
) -> ToolsReport | None:
    """The tool-calling rows: the demo's model (the world's loaded copy, when real)."""
    if not tasks:
        return None
    from ..tools import ToolsConfig, run_tools_bench

    model: str | Model = config.model if shared is None else shared
    tools_config = ToolsConfig(
        models=(model,),
        strategies=tuple(TOOL_STRATEGIES.values()),
        source=f"tool-calling dev, {len(tasks)} tasks",
        progress=progress,
    )
    return await run_tools_bench(tasks, tools_config)


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
    """The side-by-side table and where the files are."""
    table = Table(
        title=f"closedloop demo: model {report.model['spec']}, the same tools and prompts "
        f"per suite; world profile {report.profile}"
    )
    for col in ("suite", "loop", "success", "95 % CI", "model calls", "tokens", "seconds"):
        table.add_column(col, justify="left" if col in ("suite", "loop") else "right")
    for row in report.rows:
        suite = (
            f"tool calling ({row.tasks} tasks)"
            if row.suite == "tools"
            else f"world ({row.tasks} tasks)"
        )
        table.add_row(
            suite,
            row.label,
            f"{row.successes}/{row.tasks} ({100 * row.success:.0f} %)",
            f"{100 * row.ci_low:.0f}–{100 * row.ci_high:.0f} %",
            f"{row.model_calls:.1f}",
            f"{row.tokens:.0f}",
            f"{row.seconds:.1f}",
        )
    console.print(table)
    console.print(
        "cost columns are per task; the closed and frozen rows differ only in the "
        f"controller; '{ROW_LABELS['reference']}' is closedloop with its domain rules proposing",
        highlight=False,
    )
    for name, path in report.files.items():
        console.print(f"{name}: {path}", highlight=False)
    console.print(f"real time: {report.wall_s:.1f} s", highlight=False)
    if report.lead is not None:
        console.print(
            "the lead table (printed first) replays all the eval tasks; it is in report.json",
            highlight=False,
        )


def run_demo_sync(config: DemoConfig, console: Console) -> DemoReport:
    """The demo from sync code (the CLI)."""
    return asyncio.run(run_agent_demo(config, console=console))
