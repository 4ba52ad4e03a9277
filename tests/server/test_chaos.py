"""The short form of the chaos benchmark (``bench/chaos.py`` runs the long one): two
workers on a real redis-server, runs with irreversible effects, some repeating an earlier
run's idempotency key, one worker killed with SIGKILL while it executes a run."""

from __future__ import annotations

from pathlib import Path

import pytest

from closedloop_bench.benchmarks._chaos import ChaosPlan, chaos_row, percentile, run_chaos

pytestmark = pytest.mark.integration


def test_percentile_takes_the_nearest_rank() -> None:
    assert percentile([], 0.5) is None
    assert percentile([3.0, 1.0, 2.0], 0.5) == 2.0
    assert percentile([1.0, 2.0, 3.0, 4.0, 10.0], 0.95) == 10.0


def test_a_killed_worker_loses_no_run_and_duplicates_no_effect(
    redis_url: str, tmp_path: Path
) -> None:
    plan = ChaosPlan(
        duration_s=60.0,
        runs=10,
        kills_at_s=[2.0],
        submit_every_s=0.4,
        repeat_share=0.3,
        delay_s=0.6,
        takeover_after_s=3.0,
        bound_s=90.0,
        seed=7,
    )
    report = run_chaos(redis_url, tmp_path, plan)
    assert report["plan"]["kills"] == 1, report
    assert report["plan"]["workers_after"] == 2  # the killed worker was started again
    assert report["runs_submitted"] == 10
    assert report["duplicated_effects"] == 0, report
    assert report["lost_effects"] == 0, report
    assert report["lost_runs"] == 0, report["not_completed"]
    assert report["runs_completed"] == 10
    first_runs = report["runs_submitted"] - report["runs_repeating_a_key"]
    assert report["effects"] == first_runs  # one effect per customer, repeats replayed
    # The worker killed was executing a run: it was taken over, inside the bound.
    assert report["runs_taken_over"] >= 1, report
    assert report["time_to_takeover_s"]["n"] >= 1
    assert report["time_to_takeover_s"]["p95"] < 30.0
    row = chaos_row(report)
    assert row.startswith("| chaos: 2 workers on Redis, 1 SIGKILLs") and row.endswith("| 0 | 0 |")
