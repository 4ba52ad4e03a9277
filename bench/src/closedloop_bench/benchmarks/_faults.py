"""``closedloop bench faults``: run the episodes, summarise the cells, check the targets
and the published claims (like for like, ``_claims``), read every controller-on row
against its frozen counterpart, and write ``report.json``, ``curves.png`` and, over
profiles ``NAME@λ``, ``lambda.png``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from ..reference import verify_world_tasks
from ..world import load_profile
from ._claims import check_claims, on_vs_frozen
from ._lambda import lambda_curves, plot_lambda
from ._models import ModelSource
from ._report import (
    CellSummary,
    EpisodeResult,
    FaultsReport,
    TargetCheck,
    plot_curves,
    summarise,
    write_json,
)
from ._runner import EpisodeExecutor, FaultsConfig, make_runner, plan_jobs, run_jobs

__all__ = ["check_claims", "check_targets", "run_faults_bench", "summarise_cells"]

Progress = Callable[[int, int, EpisodeResult], None]


def summarise_cells(rows: Sequence[EpisodeResult]) -> list[CellSummary]:
    """One summary per (profile, strategy, steps), and per (profile, strategy) over all
    steps (``steps`` 0), in the order strategies and steps first appear."""
    cells: list[CellSummary] = []
    profiles = list(dict.fromkeys(r.profile for r in rows))
    strategies = list(dict.fromkeys(r.strategy for r in rows))
    for profile in profiles:
        for name in strategies:
            mine = [r for r in rows if r.profile == profile and r.strategy == name]
            if not mine:
                continue
            cells.append(summarise(mine, name, profile, 0))
            for steps in sorted({r.steps for r in mine}):
                cells.append(summarise([r for r in mine if r.steps == steps], name, profile, steps))
    return cells


def _cell(cells: Sequence[CellSummary], profile: str, name: str, steps: int) -> CellSummary | None:
    for c in cells:
        if c.profile == profile and c.strategy == name and c.steps == steps:
            return c
    return None


def check_targets(cells: Sequence[CellSummary], profile: str = "seed000") -> list[TargetCheck]:
    """The issue's targets for closedloop PID+ADRC under ``profile``, where measurable."""
    adrc = _cell(cells, profile, "closedloop_adrc", 0)
    if adrc is None:
        return []
    out: list[TargetCheck] = []
    at7 = _cell(cells, profile, "closedloop_adrc", 7)
    out.append(
        TargetCheck(
            target="success at 7 steps",
            measured=None if at7 is None else at7.success,
            threshold=0.97,
            met=None if at7 is None else at7.success >= 0.97,
            note="" if at7 is None else f"{at7.successes}/{at7.episodes} episodes",
        )
    )
    ratio = adrc.success / adrc.oracle if adrc.oracle > 0 else None
    out.append(
        TargetCheck(
            target="success / oracle bound (all steps)",
            measured=ratio,
            threshold=0.95,
            met=None if ratio is None else ratio >= 0.95,
        )
    )
    open_loop = _cell(cells, profile, "open_loop", 0)
    if open_loop is not None and open_loop.latency_p50_s and adrc.latency_p50_s is not None:
        ratio = adrc.latency_p50_s / open_loop.latency_p50_s
        out.append(
            TargetCheck(
                target="latency p50 / open loop's",
                measured=ratio,
                threshold=1.15,
                met=ratio <= 1.15,
            )
        )
    overall = [c for c in cells if c.profile == profile and c.steps == 0]
    fewest = min((c.model_calls for c in overall), default=0.0)
    cheapest = next((c.strategy for c in overall if c.model_calls == fewest), "")
    if fewest > 0:
        calls: float | None = adrc.model_calls / fewest
    else:  # some strategy called no model at all: only another that calls none matches it
        calls = 1.0 if adrc.model_calls == 0 else None
    out.append(
        TargetCheck(
            target="model calls / the fewest of any strategy",
            measured=calls,
            threshold=1.3,
            met=calls is not None and calls <= 1.3,
            note=f"fewest: {cheapest} ({fewest:.2f} per episode)",
        )
    )
    return out


def _notes(config: FaultsConfig, source: ModelSource) -> list[str]:
    notes = [
        "latency = an episode's wall time less its time waiting for the shared model, plus "
        "the compute time of its model calls (a cached call is charged what it cost when made)",
        f"every retrying strategy has {config.attempts} attempts per call; the oracle bound "
        "uses the same budget",
    ]
    if any(load_profile(p).regimes is not None for p in config.profiles):
        notes.append(
            "on profiles with regimes the oracle bound plays each service's regime chain on "
            "its own ideal requests: a call whose every attempt falls in a down or storm "
            "spell is not solvable (the chain moves with requests, so waiting does not help)"
        )
    cache = source.describe().get("cache")
    if cache is not None:
        notes.append(
            f"completions at temperature 0 are cached by exact prompt and parameters in "
            f"{cache['path']}: {cache['hits']} hits, {cache['coalesced']} shared in flight, "
            f"{cache['misses']} computed, {cache['uncacheable']} uncacheable (temperature > 0)"
        )
    if source.deterministic:
        notes.append(
            "test:oracle plans perfectly and answers from what it observed, with no control "
            "of its own: the differences are the strategies' control alone"
        )
    return notes


async def run_faults_bench(
    config: FaultsConfig,
    *,
    progress: Progress | None = None,
    executor: EpisodeExecutor | None = None,
    source: ModelSource | None = None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> FaultsReport:
    """Run the benchmark of ``config``; write ``report.json`` and ``curves.png`` to
    ``config.out`` when set. ``progress(done, total, result)`` follows every episode."""
    started = time.perf_counter()
    done = 0

    def note(result: EpisodeResult) -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, total, result)

    if config.tasks is not None:
        # A user's tasks must hold up on a fault-free world before any model is called.
        await verify_world_tasks(config.tasks, world_seed=config.world_seed)
    runner = make_runner(config, source=source, sleep=sleep, on_result=note)
    jobs = plan_jobs(config, list(runner.tasks.values()))
    total = len(jobs)
    rows = await run_jobs(config, jobs, runner, executor)
    cells = summarise_cells(rows)
    profile = "seed000" if "seed000" in config.profiles else config.profiles[0]
    report = FaultsReport(
        command=config.command,
        config=config.as_dict(),
        model=runner.source.describe(),
        wall_s=time.perf_counter() - started,
        episodes=rows,
        cells=cells,
        targets=check_targets(cells, profile),
        claims=check_claims(rows, cells, profile, config=config),
        on_vs_frozen=on_vs_frozen(rows),
        lambda_curves=lambda_curves(rows),
        notes=_notes(config, runner.source),
    )
    if config.out is not None:
        write_outputs(report, config.out)
    return report


def write_outputs(report: FaultsReport, out: Path) -> tuple[Path, Path]:
    """``report.json`` and ``curves.png`` under ``out``, and ``lambda.png`` when the run
    covered profiles ``NAME@λ``."""
    json_path = write_json(report, out / "report.json")
    png = plot_curves(
        report.cells, out / "curves.png", title=f"faults benchmark, model {report.model['spec']}"
    )
    plot_lambda(report.lambda_curves, report.on_vs_frozen, out / "lambda.png")
    return json_path, png
