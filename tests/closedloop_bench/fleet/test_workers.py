"""Worker processes sharing one limiter through a real Redis, on the simulator's clock."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from closedloop_bench.fleet import SCHEDULES, Capacity, Schedule
from closedloop_bench.fleet._workers import run_workers

pytestmark = [pytest.mark.integration]


def _short() -> Schedule:
    # 40 s, 12 agents, capacity to 40 % from 32 s to 36 s.
    def at(t: float) -> Capacity:
        return Capacity(0.4, 1.0, 0.4) if 32.0 <= t < 36.0 else Capacity()

    return Schedule("short", 40.0, at, onset_s=32.0, return_s=36.0, clients=12)


def test_two_worker_processes_on_redis_replay_exactly(redis_url: str) -> None:
    sched = _short()
    a = run_workers(2, sched, 3, redis_url=redis_url)
    b = run_workers(2, sched, 3, redis_url=redis_url)
    assert a.calls_done == b.calls_done and a.attempts == b.attempts
    assert a.calls_ok > 50


def test_the_shared_limit_holds_across_the_two_processes(redis_url: str) -> None:
    # 12 agents, a limit of 2 held by each worker: together they never hold more than 2,
    # where two gates each with a state of its own would hold 4.
    res = run_workers(2, _short(), 5, redis_url=redis_url, initial_limit=2.0, frozen=True)
    assert res.calls_ok > 20
    assert res.peak_inflight == 2


def test_several_workers_need_redis() -> None:
    with pytest.raises(ValueError, match="redis_url"):
        run_workers(2, _short(), 1, redis_url=None)


def test_the_command_pairs_the_arms_by_seed(
    redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from closedloop_bench.cli import bench_app

    monkeypatch.setitem(SCHEDULES, "short", _short())
    out = tmp_path / "fleet"
    args = ["fleet-shared", "--seeds", "1,2", "--schedules", "short", "--redis", redis_url]
    result = CliRunner().invoke(bench_app, [*args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads((out / "shared.json").read_text())
    assert report["command"] == (
        f"closedloop bench fleet-shared --seeds 1,2 --schedules short --out {out}"
    )
    assert not (out / ".shared-progress.jsonl").exists()
    block = report["schedules"]["short"]
    assert [row["seed"] for row in block["rows"]] == [1, 2]
    for row in block["rows"]:
        one = row["one_worker"]["goodput_of_capacity"]
        two = row["two_workers"]["goodput_of_capacity"]
        assert row["relative_difference"] == pytest.approx(two / one - 1, abs=1e-3)
    rel = block["relative_difference"]
    assert rel["lo"] <= rel["mean"] <= rel["hi"]
    assert block["within_5_percent"] == (rel["lo"] > -0.05)
