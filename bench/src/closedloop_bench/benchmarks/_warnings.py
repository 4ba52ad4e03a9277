"""Early warning on regime onsets: does an estimator flag trouble before the loop fails?

On a profile with regimes the world logs when each service left ``healthy``; the closed
loop's trace holds every step's time, error, retries and disturbance estimate. For each
onset the loop met, the *first failed step* is the first step from the onset on, started
before the disturbance ended, that failed, under one of two definitions:

* ``outcome``: the step's outcome failed (error 1) after the loop's own retries;
* ``request``: that, or the step had to retry a failed request (the loop saw trouble even
  if it absorbed it; an empty answer's re-check does not count).

A detector *flags the onset ahead* when its alarm is on at a step from the onset on and
before that failed step, so the failed step ran under the warning; the lead is counted in
steps and in seconds (from the end of the alarm step, when the warning is there to act
on, to the end of the failed step, when the failure shows). An onset whose disturbance
the loop met without a failed step is *absorbed*: there was nothing to warn of, and it is
reported apart. A *calm* step overlaps no disturbance of any service; a calm step with
the alarm on is a false alarm.

Two detectors, fed only what the loop itself measures:

* ``regression_eso``: the loop's own disturbance estimate f_est (``RegressionESO``, an
  extended state observer after Han 2009), alarmed at the dual-verification threshold;
* ``cusum_latency``: a one-sided CUSUM (Page 1954) on the log of each step's duration
  over the median of the episode's earlier steps, ``S = max(0, S + x − k)``, alarmed at
  ``S ≥ h``; a degraded service answers slower, and the retries the loop absorbs take
  time, before a step fails: neither shows in step quality.

Onset times come from the world's log and step times from the moment each step's record
reaches the trace, read on the same world clock (counted from the world's reset).
"""

from __future__ import annotations

import asyncio
import json
import math
import statistics
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from closedloop._exceptions import ConfigurationError
from closedloop._validation import require_finite, require_non_negative
from closedloop.agent import RunResult, StepRecord

from ..world import World
from ._models import ModelSource
from ._report import EpisodeResult
from ._runner import EpisodeJob, FaultsConfig, make_runner, plan_jobs, run_jobs

__all__ = [
    "DETECTORS",
    "FAILURES",
    "CusumLatency",
    "EpisodeTrace",
    "EsoThreshold",
    "Onset",
    "StepSignal",
    "TraceCollector",
    "onsets_from_changes",
    "render_warnings",
    "run_warnings",
    "score_detector",
    "signals_from_records",
    "write_warnings",
]

FAILED_ERROR = 0.99
"""A step error at or above this is an outright failure (a failed observation reads 1)."""


@dataclass(frozen=True, slots=True)
class StepSignal:
    """One step as a detector sees it: when it ended, how long it took, and how it went."""

    t_s: float
    duration_s: float
    error: float
    failed: bool
    f_est: float
    faulted: bool = False


@dataclass(frozen=True, slots=True)
class Onset:
    """A service left ``healthy`` for ``regime`` at ``t_s``; the disturbance ended at
    ``end_s`` (the next time the service was seen healthy, or the episode's end)."""

    service: str
    regime: str
    t_s: float
    end_s: float


def signals_from_records(
    records: Iterable[StepRecord], ended_s: Sequence[float] | None = None
) -> list[StepSignal]:
    """The step signals of a trace: ``failed`` if its error is 1 (its outcome failed after
    the loop's retries), ``faulted`` if it retried a failed request (not an empty answer's
    re-check). ``ended_s`` gives each step's end on another clock (the world's, so that
    steps and onsets share one time base); by default the trace's own ``t_s``."""
    out: list[StepSignal] = []
    previous = 0.0
    records = list(records)
    if ended_s is not None and len(ended_s) != len(records):
        raise ConfigurationError(
            "ended_s", len(ended_s), f"needs one time per record ({len(records)})"
        )
    for n, record in enumerate(records):
        t_s = record.t_s if ended_s is None else ended_s[n]
        out.append(
            StepSignal(
                t_s=t_s,
                duration_s=max(0.0, t_s - previous),
                error=record.error,
                failed=record.error >= FAILED_ERROR,
                f_est=record.f_est,
                faulted=any(r.get("status") != "empty" for r in record.retries),
            )
        )
        previous = t_s
    return out


def onsets_from_changes(changes: Iterable[Mapping[str, Any]], end_s: float) -> list[Onset]:
    """The onsets of a regime log (changes out of ``healthy``), each with its end."""
    rows = sorted(changes, key=lambda c: float(c["t_s"]))
    out: list[Onset] = []
    for i, change in enumerate(rows):
        if change["from_regime"] != "healthy":
            continue
        service = change["service"]
        end = next(
            (
                float(c["t_s"])
                for c in rows[i + 1 :]
                if c["service"] == service and c["to_regime"] == "healthy"
            ),
            end_s,
        )
        out.append(Onset(service, str(change["to_regime"]), float(change["t_s"]), end))
    return out


@dataclass(frozen=True, slots=True)
class EsoThreshold:
    """The regression ESO's alarm: f_est at or above ``threshold``."""

    threshold: float = 0.4
    name: str = "regression_eso"
    source: str = "RegressionESO f_est >= 0.4 (extended state observer, Han 2009)"

    def alarms(self, steps: Sequence[StepSignal]) -> list[bool]:
        return [s.f_est >= self.threshold for s in steps]


@dataclass(frozen=True, slots=True)
class CusumLatency:
    """One-sided CUSUM (Page 1954) on ``log(duration / median of earlier durations)``.

    ``k`` is the slack per step (log 1.5: a step half again as slow as usual adds nothing),
    ``h`` the alarm level; the sum restarts after an alarm-free return below zero.
    ``warmup`` steps build the reference before anything is summed.
    """

    k: float = math.log(1.5)
    h: float = math.log(2.0)
    warmup: int = 2
    name: str = "cusum_latency"
    source: str = "one-sided CUSUM on log step duration (Page 1954), k = log 1.5, h = log 2"

    def __post_init__(self) -> None:
        require_non_negative("k", self.k)
        require_finite("h", self.h)

    def alarms(self, steps: Sequence[StepSignal]) -> list[bool]:
        out: list[bool] = []
        total = 0.0
        for i, step in enumerate(steps):
            earlier = [s.duration_s for s in steps[:i] if s.duration_s > 0.0]
            if i < self.warmup or not earlier or step.duration_s <= 0.0:
                out.append(False)
                continue
            reference = statistics.median(earlier)
            x = max(-2.0, min(2.0, math.log(step.duration_s / reference)))
            total = max(0.0, total + x - self.k)
            out.append(total >= self.h)
        return out


DETECTORS: tuple[EsoThreshold | CusumLatency, ...] = (EsoThreshold(), CusumLatency())
"""The detectors the report scores, in its order."""


@dataclass(slots=True)
class Score:
    """One detector's tally over episodes."""

    onsets: int = 0
    absorbed: int = 0
    with_failure: int = 0
    flagged: int = 0
    at_onset: int = 0
    lead_steps: list[int] = field(default_factory=list)
    lead_s: list[float] = field(default_factory=list)
    calm_steps: int = 0
    false_alarms: int = 0
    by_regime: dict[str, list[int]] = field(default_factory=dict)  # regime -> [failed, flagged]

    def as_dict(self) -> dict[str, Any]:
        def mean(xs: Sequence[float]) -> float | None:
            return None if not xs else round(statistics.fmean(xs), 3)

        return {
            "onsets": self.onsets,
            "absorbed": self.absorbed,
            "onsets_with_failure": self.with_failure,
            "failed_at_the_onset_step": self.at_onset,
            "flagged_ahead": self.flagged,
            "flagged_ahead_share": (
                None if not self.with_failure else round(self.flagged / self.with_failure, 4)
            ),
            "lead_steps_mean": mean(self.lead_steps),
            "lead_s_mean": mean(self.lead_s),
            "calm_steps": self.calm_steps,
            "false_alarm_steps": self.false_alarms,
            "false_alarms_per_100_calm_steps": (
                None if not self.calm_steps else round(100 * self.false_alarms / self.calm_steps, 2)
            ),
            "by_regime": {
                r: {"onsets_with_failure": v[0], "flagged_ahead": v[1]}
                for r, v in sorted(self.by_regime.items())
            },
        }


FAILURES = ("outcome", "request")
"""The two definitions of a failed step (see the module)."""


def score_detector(
    score: Score,
    steps: Sequence[StepSignal],
    onsets: Sequence[Onset],
    alarms: Sequence[bool],
    failure: str = "outcome",
) -> None:
    """Add one episode to ``score`` under the ``failure`` definition (see the module)."""
    if failure not in FAILURES:
        raise ConfigurationError("failure", failure, f"must be one of {FAILURES}")
    broke = [s.failed or (failure == "request" and s.faulted) for s in steps]
    starts = [s.t_s - s.duration_s for s in steps]
    for k, step in enumerate(steps):
        disturbed = any(starts[k] < o.end_s and step.t_s >= o.t_s for o in onsets)
        if not disturbed:
            score.calm_steps += 1
            score.false_alarms += alarms[k]
    for onset in onsets:
        first = next((k for k, s in enumerate(steps) if s.t_s >= onset.t_s), None)
        if first is None:
            continue
        score.onsets += 1
        failed = next(
            (k for k in range(first, len(steps)) if broke[k] and starts[k] < onset.end_s),
            None,
        )
        if failed is None:
            score.absorbed += 1
            continue
        score.with_failure += 1
        score.at_onset += failed == first  # no step between: nothing could warn ahead
        tally = score.by_regime.setdefault(onset.regime, [0, 0])
        tally[0] += 1
        alarm = next((k for k in range(first, failed) if alarms[k]), None)
        if alarm is not None:
            score.flagged += 1
            tally[1] += 1
            score.lead_steps.append(failed - alarm)
            score.lead_s.append(max(0.0, steps[failed].t_s - steps[alarm].t_s))


class TraceCollector:
    """A trace sink that keeps the step records of one episode in memory, each with the
    time it arrived on ``clock`` (the world's, when given: the run's own clock starts a
    little after the world's reset, and an onset in the last step would otherwise fall
    after every step)."""

    def __init__(self, clock: Callable[[], float] | None = None) -> None:
        self.records: list[StepRecord] = []
        self.arrived_s: list[float] = []
        self._clock = clock

    async def write(self, record: StepRecord) -> None:
        self.records.append(record)
        self.arrived_s.append(record.t_s if self._clock is None else self._clock())

    def signals(self) -> list[StepSignal]:
        """The episode's step signals, timed on the collector's clock."""
        return signals_from_records(self.records, self.arrived_s)

    async def close(self, result: RunResult) -> None:
        return None


@dataclass(frozen=True, slots=True)
class EpisodeTrace:
    """What the report needs of one episode: its steps and its world's regime log."""

    profile: str
    task_id: str
    steps: tuple[StepSignal, ...]
    onsets: tuple[Onset, ...]


TARGETS = {"flagged_ahead_share": 0.80, "false_alarms_per_100_calm_steps": 10.0}
"""What the early-warning study aims for: most onsets flagged ahead, few false alarms."""

DEFINITIONS = {
    "failed_step.outcome": "a step whose outcome failed (error 1) after the loop's retries",
    "failed_step.request": "that, or a step that retried a failed request",
    "flagged_ahead": "alarm on at a step from the onset on and before its first failed step",
    "absorbed": "an onset whose disturbance the loop met without a failed step",
    "failed_at_the_onset_step": "onsets whose first failed step is the onset's own step: "
    "no step lies between, so no detector can flag them ahead",
    "lead_s": "from the end of the first alarm step to the end of the failed step",
    "calm_step": "a step that overlaps no service's disturbance",
    "false_alarm": "a calm step with the alarm on",
}


def _key(profile: str, task_id: str, repetition: int, strategy: str) -> tuple[str, str, int, str]:
    return (profile, task_id, repetition, strategy)


async def run_warnings(
    config: FaultsConfig,
    *,
    detectors: Sequence[EsoThreshold | CusumLatency] = DETECTORS,
    source: ModelSource | None = None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Run the closed-loop strategies of ``config`` with their traces kept, and score each
    detector on the regime onsets the episodes met. Returns the report (plain JSON)."""
    unknown = [s for s in config.strategies if not s.startswith("closedloop")]
    if unknown:
        raise ConfigurationError(
            "strategies", unknown, "the early-warning study needs closedloop strategies (traces)"
        )
    collectors: dict[tuple[str, str, int, str], TraceCollector] = {}

    def traces(job: EpisodeJob, world: World) -> TraceCollector:
        collector = TraceCollector(clock=world.elapsed)
        collectors[_key(job.profile, job.task_id, job.repetition, job.strategy)] = collector
        return collector

    done = 0

    def note(_result: EpisodeResult) -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, total)

    started = time.perf_counter()
    runner = make_runner(config, source=source, sleep=sleep, traces=traces, on_result=note)
    jobs = plan_jobs(config, list(runner.tasks.values()))
    total = len(jobs)
    rows = await run_jobs(config, jobs, runner)
    cells = [(f, d.name) for f in FAILURES for d in detectors]
    scores = {p: {cell: Score() for cell in cells} for p in config.profiles}
    overall = {cell: Score() for cell in cells}
    for row in rows:
        collector = collectors.get(_key(row.profile, row.task_id, row.repetition, row.strategy))
        steps = collector.signals() if collector is not None else []
        end_s = steps[-1].t_s if steps else 0.0
        onsets = onsets_from_changes(row.regime_changes, end_s)
        for detector in detectors:
            alarms = detector.alarms(steps)
            for failure in FAILURES:
                cell = (failure, detector.name)
                score_detector(scores[row.profile][cell], steps, onsets, alarms, failure)
                score_detector(overall[cell], steps, onsets, alarms, failure)

    def nest(by_cell: Mapping[tuple[str, str], Score]) -> dict[str, dict[str, Any]]:
        return {f: {n: by_cell[(f, n)].as_dict() for f2, n in cells if f2 == f} for f in FAILURES}

    summary = nest(overall)
    return {
        "schema_version": 1,
        "command": config.command,
        "config": config.as_dict(),
        "wall_s": round(time.perf_counter() - started, 1),
        "episodes": len(rows),
        "detectors": {d.name: d.source for d in detectors},
        "definitions": DEFINITIONS,
        "targets": TARGETS,
        "precursor": PRECURSOR,
        "all": summary,
        "met": {
            failure: {name: _met(result) for name, result in by_name.items()}
            for failure, by_name in summary.items()
        },
        "profiles": {profile: nest(by_cell) for profile, by_cell in scores.items()},
    }


PRECURSOR = (
    "an onset from healthy has no precursor: a healthy spell ends with a constant hazard "
    "(the onset rate per request) and the next regime is an independent draw, so no "
    "estimator can flag it ahead; only a degraded spell's latency ramp shows before it fails"
)


def _met(result: Mapping[str, Any]) -> dict[str, bool | None]:
    """Each target met or not; None where it cannot be judged (no onset: nothing tested)."""
    share, rate = result["flagged_ahead_share"], result["false_alarms_per_100_calm_steps"]
    if not result.get("onsets"):
        share = rate = None
    return {
        "flagged_ahead_share": None if share is None else share >= TARGETS["flagged_ahead_share"],
        "false_alarms_per_100_calm_steps": (
            None if rate is None else rate <= TARGETS["false_alarms_per_100_calm_steps"]
        ),
    }


def write_warnings(report: Mapping[str, Any], path: Path) -> Path:
    """Write the report as indented JSON to ``path`` (its folder made if needed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f} %"


def _num(x: float | None, unit: str = "") -> str:
    return "-" if x is None else f"{x:.2f}{unit}"


def render_warnings(report: Mapping[str, Any], console: Console) -> None:
    """The early-warning table: per failure definition, profile and detector; then all."""
    table = Table(title="early warning on regime onsets (closed loop)")
    for column in (
        "failed step",
        "profile",
        "detector",
        "onsets (absorbed)",
        "failed at onset step",
        "flagged ahead",
        "lead steps",
        "lead s",
        "false alarms / 100 calm",
    ):
        left = column in ("failed step", "profile", "detector")
        table.add_column(column, justify="left" if left else "right")
    for failure in FAILURES:
        rows = [(p, item) for p, by in report["profiles"].items() for item in by[failure].items()]
        rows += [("all", item) for item in report["all"][failure].items()]
        for profile, (name, r) in rows:
            table.add_row(
                failure,
                profile,
                name,
                f"{r['onsets']} ({r['absorbed']})",
                f"{r['failed_at_the_onset_step']}/{r['onsets_with_failure']}",
                f"{r['flagged_ahead']}/{r['onsets_with_failure']} {_pct(r['flagged_ahead_share'])}",
                _num(r["lead_steps_mean"]),
                _num(r["lead_s_mean"], " s"),
                _num(r["false_alarms_per_100_calm_steps"]),
            )
    console.print(table)
    targets = report["targets"]
    if report.get("precursor"):
        console.print(f"note: {report['precursor']}", highlight=False)
    console.print(
        f"targets: flagged ahead >= {100 * targets['flagged_ahead_share']:.0f} % of onsets with "
        f"a failure, <= {targets['false_alarms_per_100_calm_steps']:.0f} false alarms per 100 "
        "calm steps",
        highlight=False,
    )
    for failure, by_name in report["met"].items():
        for name, met in by_name.items():
            by_regime = ", ".join(
                f"{regime} {v['flagged_ahead']}/{v['onsets_with_failure']}"
                for regime, v in report["all"][failure][name]["by_regime"].items()
            )
            console.print(
                f"- {failure} / {name}: targets met {met}; flagged by regime: {by_regime or '-'}",
                highlight=False,
            )
