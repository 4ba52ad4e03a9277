"""The benchmark as a command: ``closedloop bench tools`` and ``bench/tools.py`` run this.

Bad input (a task file line with a missing field or an unknown function, a spec, a
strategy name, a count below 1) raises a ``ConfigurationError`` naming it before any
model is called; both front ends print it as one line.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from closedloop import ConfigurationError
from closedloop.models import allow_real_model_calls

from ._format import FAMILIES, ToolTask, describe_tool_tasks, load_tool_tasks
from ._generate import DATA_DIR, write_data
from ._report import ToolsReport, idle_on_one_call, plot_plane, render_table, write_report
from ._runner import ToolsConfig, run_tools_bench

__all__ = ["ToolsCommand", "interleave", "run_tools_command", "split_csv"]


def interleave(tasks: Sequence[ToolTask]) -> list[ToolTask]:
    """The tasks with the families taken in turn (single, choose, ... single, ...)."""
    by_family = {f: [t for t in tasks if t.family == f] for f in FAMILIES}
    out: list[ToolTask] = []
    for index in range(max((len(v) for v in by_family.values()), default=0)):
        out.extend(group[index] for group in by_family.values() if index < len(group))
    return out


def _of_families(tasks: Sequence[ToolTask], families: str | None) -> list[ToolTask]:
    if families is None:
        return list(tasks)
    wanted = split_csv(families)
    unknown = [f for f in wanted if f not in FAMILIES]
    if unknown or not wanted:
        raise ConfigurationError("--family", families, f"each must be one of {', '.join(FAMILIES)}")
    return [t for t in tasks if t.family in wanted]


def split_csv(text: str) -> list[str]:
    """The non-empty parts of a comma-separated option."""
    return [part.strip() for part in text.split(",") if part.strip()]


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolsCommand:
    """The command's options (the same in both front ends)."""

    tasks: Path | None = None
    split: Literal["dev", "eval"] = "dev"
    limit: int | None = None
    families: str | None = None  # comma-separated: keep these families only
    models: str = "test:oracle"
    strategies: str = "open_loop,strict"
    out: Path | None = None
    results: Path = Path("runs/bench-tools")
    cost: Literal["tokens", "wall_s"] = "tokens"
    threads: int | None = None
    budget_s: float | None = None
    plot: bool = True
    progress: bool = True
    regenerate: bool = False
    explain: bool = False  # list the tasks and stop: no model is loaded


def run_tools_command(
    options: ToolsCommand, *, say: Callable[[str], None] = print
) -> ToolsReport | None:
    """Run the command; ``say`` prints each line of its output (None after regenerating or
    explaining)."""
    if options.regenerate:
        for split, path in write_data(DATA_DIR).items():
            say(f"{split}: {path}")
        return None
    if options.split not in ("dev", "eval"):
        raise ConfigurationError("--split", options.split, "must be dev or eval")
    if options.limit is not None and options.limit < 1:
        raise ConfigurationError("--limit", options.limit, "must be at least 1")
    if options.cost not in ("tokens", "wall_s"):
        raise ConfigurationError("--cost", options.cost, "must be tokens or wall_s")
    path = options.tasks if options.tasks is not None else DATA_DIR / f"{options.split}.jsonl"
    tasks = interleave(_of_families(load_tool_tasks(path), options.families))
    if options.limit is not None:
        tasks = tasks[: options.limit]
    if options.explain:
        say(describe_tool_tasks(tasks).rstrip("\n"))
        say(f"{len(tasks)} task(s) from {path}")
        return None
    label = f"{path.stem}" + (f" [{options.families}]" if options.families else "")
    label += f" (first {len(tasks)})" if options.limit else ""
    kept = "-" + "+".join(split_csv(options.families)) if options.families else ""
    out = options.out or options.results / f"{path.stem}{kept}-{len(tasks)}.json"
    # Each result is kept next to the report as it is scored; a killed run started again
    # with the same options resumes from it, and the finished report replaces it.
    checkpoint = out.with_suffix(".partial.jsonl")
    if checkpoint.exists():
        say(f"resuming from {checkpoint}")
    config = ToolsConfig(
        models=split_csv(options.models),
        strategies=split_csv(options.strategies),
        source=label,
        progress=options.progress,
        model_options={} if options.threads is None else {"n_threads": options.threads},
        budget_s=options.budget_s,
        checkpoint=checkpoint,
    )
    with allow_real_model_calls():
        report = asyncio.run(run_tools_bench(tasks, config))
    ran = max(report.meta["tasks_run"].values())
    if ran < len(tasks):
        report = dataclasses.replace(report, source=f"{label}, {ran} run within the budget")
    write_report(report, out)
    checkpoint.unlink(missing_ok=True)
    say(render_table(report))
    for strategy, model, idle, calls in idle_on_one_call(report):
        share = f" ({100 * idle / calls:.0f} %)" if calls else ""
        say(
            f"model calls that executed nothing on one-call tasks: {strategy} · {model}: "
            f"{idle} of {calls}{share}"
        )
    say(f"report: {out}")
    if options.plot:
        png = plot_plane(report, out.with_suffix(".png"), cost=options.cost)
        say(f"plane: {png}")
    return report
