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


def test_a_shedding_provider_refuses_once_its_queue_holds_more_than_its_bound() -> None:
    cfg = ProviderConfig(servers=1, shed_wait_s=2.0, overhead_s=0.5, tokens_lo=500, tokens_hi=500)
    plant = Provider(cfg, _const(Capacity()), seed=0)  # 1.3 s a job with every server busy
    answers = [plant.arrive(0.0, Job(i, 500, 0.0)) for i in range(3)]
    assert answers[:2] == [(0, 0.0)] * 2  # 0 and 1.3 s of work ahead of them
    assert answers[2] == (429, 1.0)  # two queued: 2.6 s > 2 s
    assert plant.queued_wait_s(0.0) == pytest.approx(2 * 1.3)


def test_the_shed_schedule_refuses_only_after_the_queue_has_grown() -> None:
    sched = SCHEDULES["shed"]
    res = simulate(STRATEGIES["fixed, no retries"], sched, seed=1)
    assert sched.onset_s is not None
    # After the warm-up (the first second's rush empties the bucket), none before the onset.
    first = min(t for t, code in res.rejections if code == 429 and t >= 30.0)
    assert first > sched.onset_s + 5.0
    # The same clients on the default plant (no shedding) get no 429 at all.
    calm = simulate(STRATEGIES["fixed, no retries"], SCHEDULES["brownout"], seed=1)
    assert not [t for t, _ in calm.rejections if t >= 30.0]


def test_a_retry_after_holds_every_waiting_caller_of_a_limiter() -> None:
    from closedloop_bench.fleet._sim import _Sim

    sched = SCHEDULES["burst"]
    sim = _Sim(STRATEGIES["PID on delay frozen"], sched, 100, 1, ProviderConfig())
    sent: list[float] = []
    original = sim.send

    def send(now: float, agent: object) -> None:
        sent.append(now)
        original(now, agent)  # type: ignore[arg-type]

    sim.send = send  # type: ignore[method-assign]
    res = sim.run()
    # After every 429 the next attempt leaves no earlier than its Retry-After.
    sent_times = sorted(sent)
    for t, code in res.rejections[:200]:
        if code != 429:
            continue
        answered = t + ProviderConfig().reject_latency_s
        after = [s for s in sent_times if answered < s < answered + 0.5]
        assert not after, (t, after[:3])


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


def test_a_stopped_run_resumes_from_its_finished_cells(tmp_path: Path) -> None:
    from closedloop_bench.fleet._bench import FleetConfig, run_fleet
    from closedloop_bench.fleet._resume import Checkpoint

    config = FleetConfig(seeds=(1,), schedules=("step",), clients=10)
    path = tmp_path / ".fleet-progress.jsonl"
    first, _ = run_fleet(config, checkpoint=Checkpoint(path, {"c": 1}))
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:4]) + '\n{"cell": "cut sh')  # stopped mid-line
    kept = Checkpoint(path, {"c": 1})
    assert len(kept.cells) == 3
    said: list[str] = []
    again, traces = run_fleet(config, progress=said.append, checkpoint=kept)
    assert sum("kept from the last run" in line for line in said) == 3
    assert again["schedules"] == first["schedules"]
    assert "step/PID on delay frozen" in traces  # plotted rows are traced again
    assert Checkpoint(path, {"c": 2}).cells == {}  # other settings: afresh


def test_the_initial_limit_is_where_a_frozen_limiter_stays(tmp_path: Path) -> None:
    from closedloop_bench.cli import bench_app

    out = tmp_path / "fleet"
    args = ["fleet", "--seeds", "1", "--schedules", "step", "--clients", "10"]
    result = CliRunner().invoke(bench_app, [*args, "--initial-limit", "5", "--out", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads((out / "report.json").read_text())
    assert report["initial_limit"] == 5.0 and "--initial-limit 5 " in report["command"]
    assert not (out / ".fleet-progress.jsonl").exists()
    res = simulate(STRATEGIES["AIMD frozen"], SCHEDULES["step"], seed=0, initial_limit=5)
    assert {lim for _, lim, _ in res.timeline} == {5.0}
