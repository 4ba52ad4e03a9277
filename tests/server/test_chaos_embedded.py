"""The short form of the embedded chaos run (``bench/chaos_embedded.py`` runs 50 kills): one
SQLite ``closedloop serve`` killed with SIGKILL three times while it executes runs with
irreversible effects, restarted each time; it finishes them by itself, once each."""

from __future__ import annotations

from pathlib import Path

import pytest

from closedloop_bench.benchmarks._chaos_embedded import EmbeddedChaosPlan, run_embedded_chaos

pytestmark = pytest.mark.integration


def test_a_killed_embedded_service_settles_every_run_once_after_each_restart(
    tmp_path: Path,
) -> None:
    lines: list[str] = []
    plan = EmbeddedChaosPlan(kills=3, runs_per_cycle=2, kill_after_s=(0.05, 0.6), seed=3)
    report = run_embedded_chaos(tmp_path, plan, progress=lines.append)
    assert report["kills"] == 3 and report["runs_posted"] == 6
    assert report["runs_not_settled"] == 0, report
    assert report["duplicated_effects"] == 0 and report["lost_effects"] == 0, report
    first_runs = report["runs_posted"] - report["runs_repeating_a_key"]
    assert report["effects"] == first_runs  # one order per customer, repeats answered
    assert report["repeats_answered_by_the_same_run"] is True
    assert report["settled_after_restart_s"]["n"] == 6
