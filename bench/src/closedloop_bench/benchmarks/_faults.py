"""``closedloop bench faults``: run the episodes, summarise the cells, check the targets
and the published claims, and write ``report.json`` and ``curves.png``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from ..reference import verify_world_tasks
from ._models import ModelSource
from ._report import (
    CellSummary,
    ClaimCheck,
    EpisodeResult,
    FaultsReport,
    TargetCheck,
    plot_curves,
    summarise,
    write_json,
)
from ._runner import EpisodeExecutor, FaultsConfig, make_runner, plan_jobs, run_jobs
from ._stats import rate

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


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def check_claims(
    rows: Sequence[EpisodeResult], cells: Sequence[CellSummary], profile: str = "seed000"
) -> list[ClaimCheck]:
    """The published numbers next to this run's, with a verdict each (where measurable)."""
    out: list[ClaimCheck] = []
    open7 = _cell(cells, profile, "open_loop", 7)
    if open7 is not None:
        below = open7.ci_high < 0.60
        out.append(
            ClaimCheck(
                claim="uncontrolled agents fall below 60 % success by step 7 (PID/ADRC article)",
                seed_value="< 60 %",
                measured=f"open loop at 7 steps: {_pct(open7.success)} "
                f"[{_pct(open7.ci_low)}, {_pct(open7.ci_high)}], n={open7.episodes}",
                verdict="confirmed"
                if below
                else ("refuted" if open7.ci_low >= 0.60 else "inconclusive (interval spans 60 %)"),
            )
        )
    one_open = _cell(cells, profile, "open_loop", 1)
    one_pid = _cell(cells, profile, "closedloop_pid", 1)
    if one_open is not None and one_pid is not None:
        before, after = 1 - one_open.success, 1 - one_pid.success
        out.append(
            ClaimCheck(
                claim="PID on a single tool call: failure 12.7 % -> 3.2 % (PID/ADRC article)",
                seed_value="12.7 % -> 3.2 %",
                measured=f"1-step tasks: open loop {_pct(before)} -> PID {_pct(after)}",
                verdict=_reduction(before, after),
            )
        )
    multi = [r for r in rows if r.profile == profile and r.steps >= 5]
    plain = [r for r in multi if r.strategy == "open_loop"]
    adrc = [r for r in multi if r.strategy == "closedloop_adrc"]
    if plain and adrc:
        a = rate(sum(r.success for r in plain), len(plain)).value
        b = rate(sum(r.success for r in adrc), len(adrc)).value
        out.append(
            ClaimCheck(
                claim="ADRC on multi-step tasks: success 61.3 % -> 89.7 % (PID/ADRC article)",
                seed_value="61.3 % -> 89.7 %",
                measured=f"tasks of 5-10 steps: open loop {_pct(a)} -> PID+ADRC {_pct(b)}",
                verdict=_reduction(1 - a, 1 - b),
            )
        )
    failures = [r for r in rows if r.profile == profile and r.strategy == "closedloop_adrc"]
    failures = [r for r in failures if not r.success]
    if failures:
        warned = sum(r.warned_early for r in failures)
        share = warned / len(failures)
        verdict = "confirmed" if share >= 0.7 else ("qualified" if share >= 0.3 else "refuted")
        out.append(
            ClaimCheck(
                claim="the ESO flags 83 % of failures ahead (PID/ADRC article)",
                seed_value="83 %",
                measured=f"{warned}/{len(failures)} PID+ADRC failures ({_pct(share)}) had left "
                "the normal protocol before their last step",
                verdict=verdict,
            )
        )
    return out


def _reduction(before: float, after: float) -> str:
    if before <= 0.0:
        return "not measurable (no failures without control)"
    if after >= before:
        return "refuted (no reduction)"
    if after <= before / 2:
        return "confirmed (failures at least halved)"
    return "qualified (smaller reduction)"


def _notes(config: FaultsConfig, source: ModelSource) -> list[str]:
    notes = [
        "latency = an episode's wall time less its time waiting for the shared model, plus "
        "the compute time of its model calls (a cached call is charged what it cost when made)",
        f"every retrying strategy has {config.attempts} attempts per call; the oracle bound "
        "uses the same budget",
    ]
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
        claims=check_claims(rows, cells, profile),
        notes=_notes(config, runner.source),
    )
    if config.out is not None:
        write_outputs(report, config.out)
    return report


def write_outputs(report: FaultsReport, out: Path) -> tuple[Path, Path]:
    """``report.json`` and ``curves.png`` under ``out``."""
    json_path = write_json(report, out / "report.json")
    png = plot_curves(
        report.cells, out / "curves.png", title=f"faults benchmark, model {report.model['spec']}"
    )
    return json_path, png
