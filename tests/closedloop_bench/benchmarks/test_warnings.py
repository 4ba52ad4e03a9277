"""The early-warning study: onsets from the regime log, failed steps, alarms, leads and false
alarms, scored on hand-built episodes; and the command that writes the report."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from closedloop import ConfigurationError
from closedloop.agent import StepRecord
from closedloop_bench.benchmarks._warnings import (
    CusumLatency,
    EsoThreshold,
    Onset,
    Score,
    StepSignal,
    TraceCollector,
    _met,
    onsets_from_changes,
    score_detector,
)
from closedloop_bench.cli._bench import app


def steps(*rows: tuple[float, float, bool, float]) -> list[StepSignal]:
    """(end time, duration, failed, f_est) per step; the error follows ``failed``."""
    return [StepSignal(t, d, 1.0 if bad else 0.0, bad, f) for t, d, bad, f in rows]


def change(service: str, t: float, a: str, b: str) -> dict[str, object]:
    return {"service": service, "index": 0, "t_s": t, "from_regime": a, "to_regime": b}


def test_onsets_are_changes_out_of_healthy_and_end_when_healthy_again() -> None:
    log = [
        change("flights", 1.0, "healthy", "degraded"),
        change("shop", 1.5, "healthy", "storm"),
        change("flights", 2.0, "degraded", "down"),
        change("flights", 3.0, "down", "healthy"),
    ]
    assert onsets_from_changes(log, end_s=9.0) == [
        Onset("flights", "degraded", 1.0, 3.0),
        Onset("shop", "storm", 1.5, 9.0),
    ]


def test_an_alarm_between_the_onset_and_the_failure_flags_it_ahead() -> None:
    run = steps(
        (1.0, 1.0, False, 0.0),
        (2.0, 1.0, False, 0.0),  # onset at 1.5 falls in this step
        (3.0, 1.0, False, 0.5),  # alarm
        (4.5, 1.5, True, 0.6),  # the first failed step
        (5.0, 0.5, False, 0.0),
    )
    score = Score()
    onset = Onset("flights", "degraded", 1.5, 4.8)
    score_detector(score, run, [onset], EsoThreshold().alarms(run))
    result = score.as_dict()
    assert (result["onsets_with_failure"], result["flagged_ahead"]) == (1, 1)
    assert result["failed_at_the_onset_step"] == 0
    assert result["lead_steps_mean"] == 1 and result["lead_s_mean"] == pytest.approx(1.5)
    assert result["calm_steps"] == 1 and result["false_alarm_steps"] == 0  # only step 0
    assert result["by_regime"] == {"degraded": {"onsets_with_failure": 1, "flagged_ahead": 1}}


def test_an_alarm_that_comes_with_the_failure_is_not_ahead() -> None:
    run = steps((1.0, 1.0, False, 0.0), (2.0, 1.0, True, 0.9), (3.0, 1.0, False, 0.9))
    score = Score()
    score_detector(score, run, [Onset("shop", "down", 1.2, 9.0)], EsoThreshold().alarms(run))
    assert score.as_dict()["flagged_ahead"] == 0 and score.with_failure == 1
    assert score.as_dict()["failed_at_the_onset_step"] == 1  # the onset's own step failed


def test_an_onset_the_loop_absorbs_has_nothing_to_warn_of() -> None:
    run = steps((1.0, 1.0, False, 0.0), (2.0, 1.0, False, 0.0), (3.0, 1.0, True, 0.0))
    score = Score()
    # The failure at step 2 started (at 2.0) after the disturbance had ended (at 1.8).
    score_detector(score, run, [Onset("shop", "storm", 0.5, 1.8)], [False] * 3)
    assert (score.onsets, score.absorbed, score.with_failure) == (1, 1, 0)
    assert score.as_dict()["flagged_ahead_share"] is None


def test_a_retried_request_is_a_failure_only_under_the_request_definition() -> None:
    run = [
        StepSignal(1.0, 1.0, 0.0, False, 0.0),
        StepSignal(2.0, 1.0, 0.0, False, 0.5),  # the onset's step; the alarm is on
        StepSignal(3.0, 1.0, 0.0, False, 0.5, faulted=True),  # absorbed a failed request
        StepSignal(4.0, 1.0, 1.0, True, 0.9),  # failed outright
    ]
    onset = [Onset("rooms", "degraded", 1.5, 9.0)]
    alarms = EsoThreshold().alarms(run)
    outcome, request = Score(), Score()
    score_detector(outcome, run, onset, alarms, "outcome")
    score_detector(request, run, onset, alarms, "request")
    assert outcome.as_dict()["lead_steps_mean"] == 2  # from step 1 to step 3
    assert request.as_dict()["lead_steps_mean"] == 1  # from step 1 to step 2
    with pytest.raises(ConfigurationError) as info:
        score_detector(Score(), run, onset, alarms, "vibes")
    assert info.value.argument == "failure"


def test_alarms_in_calm_steps_are_false_alarms() -> None:
    run = steps(*[(float(k + 1), 1.0, False, 0.5 if k % 2 else 0.0) for k in range(10)])
    score = Score()
    score_detector(score, run, [], EsoThreshold().alarms(run))
    assert score.as_dict()["false_alarms_per_100_calm_steps"] == 50.0


def test_the_cusum_sums_slow_steps_and_ignores_one_jitter() -> None:
    detector = CusumLatency()
    steady = steps(*[(float(k), 0.5, False, 0.0) for k in range(1, 8)])
    assert not any(detector.alarms(steady))
    ramp = [0.5, 0.5, 0.5, 1.0, 1.5, 2.0, 2.5]
    t = [sum(ramp[: i + 1]) for i in range(len(ramp))]
    slowing = steps(*[(t[i], d, False, 0.0) for i, d in enumerate(ramp)])
    alarms = detector.alarms(slowing)
    assert not any(alarms[:3]) and alarms[-1]
    jitter = [0.5, 0.5, 0.5, 1.2, 0.5, 0.5, 0.5]
    t = [sum(jitter[: i + 1]) for i in range(len(jitter))]
    assert not any(detector.alarms(steps(*[(t[i], d, False, 0.0) for i, d in enumerate(jitter)])))
    assert detector.k == pytest.approx(math.log(1.5))


def record(step: int, t_s: float, error: float = 0.0) -> StepRecord:
    return StepRecord(
        run_id="r",
        task_id="t",
        step=step,
        t_s=t_s,
        phase="act",
        mode="react",
        step_type="cities",
        error=error,
        control=0.0,
        quality=1.0 - error,
        f_est=0.0,
        protocol="normal",
    )


async def test_steps_are_timed_on_the_worlds_clock_so_an_onset_in_the_last_step_counts() -> None:
    # The run's clock starts 0.3 s after the world's reset; the onset (world time 1.25 s)
    # is inside the last step, which ends at 1.0 s on the run's clock but 1.3 s on the world's.
    world_now = iter([0.6, 1.3])
    collector = TraceCollector(clock=lambda: next(world_now))
    await collector.write(record(0, 0.3))
    await collector.write(record(1, 1.0, error=1.0))
    onsets = onsets_from_changes([change("shop", 1.25, "healthy", "degraded")], 1.3)
    on_run_clock = Score()
    score_detector(
        on_run_clock,
        [StepSignal(r.t_s, 0.0, r.error, r.error >= 1.0, 0.0) for r in collector.records],
        onsets,
        [False, False],
    )
    assert on_run_clock.onsets == 0  # the bug the shared clock removes
    on_world_clock = Score()
    signals = collector.signals()
    assert [s.t_s for s in signals] == [0.6, 1.3]
    assert [s.duration_s for s in signals] == pytest.approx([0.6, 0.7])
    score_detector(on_world_clock, signals, onsets, [False, False])
    assert on_world_clock.onsets == 1 and on_world_clock.with_failure == 1


def test_the_command_writes_the_report_and_uses_the_options_given(tmp_path: Path) -> None:
    # Fault seeds are keyed by the profile's name ("busy"), not its temporary path: the same
    # regimes every run, and these have onsets.
    profile = tmp_path / "busy.json"
    profile.write_text(json.dumps({"regimes": {"onset_rate": 0.5}}))
    args = ["faults", "--warnings", "--model", "test:oracle", "--latency-scale", "0.05"]
    args += ["--profiles", str(profile), "--steps", "5", "--episodes", "2", "--no-cache"]
    result = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "w")])
    assert result.exit_code == 0, result.output
    assert "early warning" in result.output and "regression_eso" in result.output
    report = json.loads((tmp_path / "w" / "early_warning.json").read_text())
    assert report["episodes"] == 2 and report["config"]["steps"] == [5]
    assert list(report["profiles"]) == [str(profile)]
    assert set(report["all"]) == {"outcome", "request"}
    for failure in ("outcome", "request"):
        assert set(report["all"][failure]) == {"regression_eso", "cusum_latency"}
    assert report["all"]["request"]["regression_eso"]["onsets"] > 0
    assert "no precursor" in report["precursor"] and "no precursor" in result.output
    recorded = report["command"].split()  # the options given, in the command's own order
    assert recorded[:3] == ["closedloop", "bench", "faults"] and "--warnings" in recorded
    assert recorded[recorded.index("--steps") + 1] == "5" and recorded[-1] == str(tmp_path / "w")


def test_no_onset_judges_no_target() -> None:
    # Without an onset the detector was never tested: neither target is "met".
    calm = {"onsets": 0, "flagged_ahead_share": None, "false_alarms_per_100_calm_steps": 0.0}
    assert _met(calm) == {"flagged_ahead_share": None, "false_alarms_per_100_calm_steps": None}
    busy = {"onsets": 3, "flagged_ahead_share": 0.9, "false_alarms_per_100_calm_steps": 2.0}
    assert _met(busy) == {"flagged_ahead_share": True, "false_alarms_per_100_calm_steps": True}


def test_the_study_refuses_strategies_without_a_trace(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["faults", "--warnings", "--strategies", "open_loop", "--out", str(tmp_path)]
    )
    assert result.exit_code != 0 and "closedloop strategies" in str(result.exception)
