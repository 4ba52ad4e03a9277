"""The fleet plant and benchmark: buckets, queue, timeouts, replay, report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from closedloop_bench.fleet import (
    SCHEDULES,
    STRATEGIES,
    Capacity,
    ProviderConfig,
    Schedule,
    simulate,
)
from closedloop_bench.fleet._plant import Job, Provider


def _const(cap: Capacity) -> Schedule:
    return Schedule("test", 10.0, lambda t: cap)


def test_bucket_refuses_with_retry_after_and_queue_overflows_with_503() -> None:
    cfg = ProviderConfig(rpm=60.0, bucket_s=2.0, queue_limit=1, servers=1)
    plant = Provider(cfg, _const(Capacity()), seed=0)
    assert plant.arrive(0.0, Job(0, 300, 0.0)) == (0, 0.0)
    assert plant.arrive(0.0, Job(1, 300, 0.0))[0] == 503  # queue of one is full
    plant.start_next(0.0)
    assert plant.arrive(0.0, Job(2, 300, 0.0)) == (0, 0.0)
    status, retry_after = plant.arrive(0.0, Job(3, 300, 0.0))
    assert status == 429 and retry_after == 1.0


def test_a_seeded_run_replays_exactly_and_seeds_differ() -> None:
    s, sched = STRATEGIES["PID on delay"], SCHEDULES["step"]
    a, b = simulate(s, sched, seed=3), simulate(s, sched, seed=3)
    assert a.runs_done == b.runs_done and a.attempts == b.attempts
    assert simulate(s, sched, seed=4).runs_done != a.runs_done


def test_timed_out_work_is_still_done_by_the_provider() -> None:
    # 200 agents against 16 servers and a 256 queue: waits pass the 10 s timeout.
    res = simulate(STRATEGIES["fixed, no retries"], SCHEDULES["steady"], seed=0)
    assert res.calls_ok < res.attempts / 4
    assert res.failures


def test_frozen_limit_never_moves() -> None:
    res = simulate(STRATEGIES["PID on delay frozen"], SCHEDULES["step"], seed=0)
    assert {lim for _, lim, _ in res.timeline} == {20.0}


def test_command_writes_report_and_plots(tmp_path: Path) -> None:
    from closedloop_bench.cli import bench_app

    out = tmp_path / "fleet"
    result = CliRunner().invoke(
        bench_app,
        ["fleet", "--seeds", "1,2", "--schedules", "step", "--clients", "20", "--out", str(out)],
    )
    assert result.exit_code == 0, result.output
    report = json.loads((out / "report.json").read_text())
    assert report["command"].startswith("closedloop bench fleet --seeds 1,2")
    assert set(report["schedules"]["step"]["rows"]) == set(STRATEGIES)
    assert (out / "step.png").stat().st_size > 1000


@pytest.mark.parametrize("args", [["--schedules", "nope"], ["--seeds", "x"], ["--clients", "5"]])
def test_bad_options_are_refused_clearly(args: list[str]) -> None:
    from closedloop_bench.cli import bench_app

    result = CliRunner().invoke(bench_app, ["fleet", *args])
    assert result.exit_code == 2
    assert "Traceback" not in result.output
