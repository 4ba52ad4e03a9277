"""The Ray executor: the same per-episode results as the asyncio executor for the same seeds,
a task that fails becomes a failed episode, the CLI's choice of executor, and the completion
cache shared by several processes. One local Ray (2 CPUs) serves the whole module."""

from __future__ import annotations

import dataclasses
import functools
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from closedloop import ConfigurationError
from closedloop.harness import LRU_CACHE, SPIRAL_MATRIX, BenchConfig, run_refine_bench
from closedloop.models import FunctionModel, ScriptedModel
from closedloop_bench.benchmarks import (
    CompletionCache,
    EpisodeResult,
    FaultsConfig,
    RayExecutor,
    model_source,
    run_faults_bench,
)
from closedloop_bench.cli._bench import app

from .conftest import FakeSleep, tiny

ray = pytest.importorskip("ray")

SWEEP: dict[str, Any] = {
    "profiles": ("none", "seed000"),
    "steps": (1, 3),
    "episodes": 2,
    "strategies": ("open_loop", "closedloop_adrc"),
    "seed": 7,
}
"""2 profiles × 2 step counts × 2 episodes × 2 strategies: 16 episodes, some faulted."""


@pytest.fixture(scope="module")
def ray_executor(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayExecutor]:
    home = tmp_path_factory.mktemp("ray-home")
    with pytest.MonkeyPatch.context() as patch:
        # Workers inherit the environment Ray starts with: keep them off the real home.
        patch.setenv("CLOSEDLOOP_HOME", str(home))
        executor = RayExecutor(num_cpus=2)
        executor.start()
    try:
        yield executor
    finally:
        executor.close()
    assert not ray.is_initialized()


def outcome(row: EpisodeResult) -> tuple[Any, ...]:
    """Everything an episode decided (not its timings)."""
    return (
        row.strategy, row.profile, row.steps, row.task_id, row.repetition, row.fault_seed,
        row.success, row.reason, row.halt, row.loop_steps, row.handed_over,
        row.oracle_solvable, row.model_calls, row.requests, row.faults, row.duplicate_effects,
        row.error,
    )  # fmt: skip


async def test_ray_gives_the_asyncio_executors_episodes(
    ray_executor: RayExecutor, sleep: FakeSleep
) -> None:
    local = await run_faults_bench(tiny(**SWEEP), sleep=sleep)
    seen: list[int] = []
    remote = await run_faults_bench(
        tiny(**SWEEP, executor="ray"),
        executor=ray_executor,
        progress=lambda done, total, _row: seen.append(done),
    )
    assert [outcome(r) for r in remote.episodes] == [outcome(r) for r in local.episodes]
    assert len(remote.episodes) == 16 and seen == list(range(1, 17))
    # The sweep is not trivial: faults happened, and they decided some episodes.
    assert any(r.faults for r in local.episodes)
    assert {r.success for r in local.episodes} == {True, False}
    assert remote.config["executor"] == "ray" and local.config["executor"] == "asyncio"


async def test_a_failed_ray_task_is_a_failed_episode(
    ray_executor: RayExecutor, sleep: FakeSleep
) -> None:
    # The driver has a model; the workers cannot build theirs (as on a node missing it).
    broken = tiny(**SWEEP, model="test:missing", executor="ray")
    report = await run_faults_bench(
        broken, executor=ray_executor, source=model_source("test:oracle")
    )
    local = await run_faults_bench(tiny(**SWEEP), sleep=sleep)
    assert len(report.episodes) == len(local.episodes) == 16
    for failed, good in zip(report.episodes, local.episodes, strict=True):
        assert not failed.success and failed.halt == "error"
        assert failed.error is not None and "ConfigurationError" in failed.error
        assert "test:missing" in failed.error
        assert (failed.task_id, failed.fault_seed, failed.domain) == (
            good.task_id,
            good.fault_seed,
            good.domain,
        )
        # The oracle bound still comes from the episode's fault seed.
        assert failed.oracle_solvable == good.oracle_solvable
    assert all(c.success == 0.0 for c in report.cells)


def test_the_cli_runs_on_ray_and_leaves_a_ray_it_did_not_start(
    ray_executor: RayExecutor, tmp_path: Path
) -> None:
    out = tmp_path / "faults"
    args = ["faults", "--model", "test:oracle", "--profiles", "none", "--steps", "1",
            "--episodes", "2", "--latency-scale", "0", "--tool-timeout", "30", "--no-cache",
            "--strategies", "open_loop,closedloop_pid", "--executor", "ray",
            "--no-frontier", "--no-warnings", "--out", str(out)]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads((out / "report.json").read_text())
    assert report["config"]["executor"] == "ray" and len(report["episodes"]) == 4
    assert all(e["success"] for e in report["episodes"])
    assert ray.is_initialized()  # the fixture's Ray: the command only connected to it


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--executor", "celery"], "--executor"),
        (["--ray-address", "auto"], "--ray-address"),
    ],
)
def test_bad_executor_options_are_one_clear_error(args: list[str], named: str) -> None:
    result = CliRunner().invoke(app, ["faults", "--model", "test:oracle", *args])
    assert result.exit_code != 0
    assert isinstance(result.exception, ConfigurationError)
    assert named in str(result.exception)


def test_bad_executor_settings_name_themselves() -> None:
    with pytest.raises(ConfigurationError, match="executor"):
        FaultsConfig(executor="threads")
    with pytest.raises(ConfigurationError, match="ray_address"):
        FaultsConfig(ray_address="auto")
    with pytest.raises(ConfigurationError, match="task_cpus"):
        RayExecutor(task_cpus=0)
    with pytest.raises(ConfigurationError, match="num_cpus"):
        RayExecutor("auto", num_cpus=2)


def test_without_ray_installed_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # what an absent package looks like
    with pytest.raises(ConfigurationError, match=r"closedloop\[ray\]"):
        RayExecutor().start()


FLAT = "```python\ndef spiral_order(m):\n    return [x for r in m for x in r]\n```"
"""Passes some of spiral_matrix's checks and none of lru_cache's, every round."""


def rounds(report: Any) -> dict[str, list[tuple[str, tuple[float | None, ...], str]]]:
    return {
        name: [(r.task, r.scores, r.stop_reason) for r in runs]
        for name, runs in {**report.runs, **report.stop_runs}.items()
    }


async def test_refine_tasks_on_ray_match_the_local_run(ray_executor: RayExecutor) -> None:
    config = BenchConfig(rounds=2, strategies=("self_refine", "pid"), loopgain=False)
    tasks = [SPIRAL_MATRIX, LRU_CACHE]
    local = await run_refine_bench(config, model=ScriptedModel([FLAT], cycle=True), tasks=tasks)
    said: list[str] = []
    remote = await ray_executor.run_refine(
        config, tasks, model_factory=functools.partial(ScriptedModel, [FLAT], cycle=True),
        progress=said.append,
    )  # fmt: skip
    assert rounds(remote) == rounds(local)
    assert remote.tasks == ["spiral_matrix", "lru_cache"] and len(said) == 2
    scores = [r.best_score for r in remote.runs["pid"]]
    assert 0.0 < scores[0] < 1.0 and scores[1] == 0.0
    assert (remote.model_calls, remote.cache_hits) == (local.model_calls, local.cache_hits)


class ScriptedOnRay:
    """The hook's executor: Ray, with every worker's model built by a picklable factory."""

    def __init__(self, executor: RayExecutor) -> None:
        self.executor = executor

    async def run_refine(self, config: BenchConfig, tasks: Any, *, progress: Any = None) -> Any:
        factory = functools.partial(ScriptedModel, [FLAT], cycle=True)
        return await self.executor.run_refine(
            config, tasks, model_factory=factory, progress=progress
        )


async def test_run_refine_bench_hands_its_shard_to_the_executor(
    ray_executor: RayExecutor, tmp_path: Path
) -> None:
    config = BenchConfig(rounds=2, strategies=("pid",), loopgain=False, shard=(2, 2))
    tasks = [LRU_CACHE, SPIRAL_MATRIX]
    local = await run_refine_bench(config, model=ScriptedModel([FLAT], cycle=True), tasks=tasks)
    out = tmp_path / "refine"
    on_ray = dataclasses.replace(config, out=out)
    remote = await run_refine_bench(on_ray, tasks=tasks, executor=ScriptedOnRay(ray_executor))
    assert remote.tasks == local.tasks == ["spiral_matrix"]
    assert rounds(remote) == rounds(local) and remote.wall_s > 0.0
    assert json.loads((out / "results.json").read_text())["tasks"] == ["spiral_matrix"]
    with pytest.raises(ConfigurationError, match="executor"):
        await run_refine_bench(
            config, model=ScriptedModel([FLAT]), executor=ScriptedOnRay(ray_executor)
        )


def test_bad_refine_executor_is_one_clear_error() -> None:
    result = CliRunner().invoke(app, ["refine", "--executor", "dask"])
    assert isinstance(result.exception, ConfigurationError)
    assert "--executor" in str(result.exception)


async def test_a_refine_task_that_fails_on_ray_is_recorded(ray_executor: RayExecutor) -> None:
    config = BenchConfig(rounds=2, strategies=("pid",), loopgain=False)
    broken = functools.partial(FunctionModel, 42)  # raises in the worker: 42 is no function
    report = await ray_executor.run_refine(config, [SPIRAL_MATRIX], model_factory=broken)
    (failed,) = report.runs["pid"]
    assert failed.stop_reason == "error" and failed.best_score == 0.0
    assert "ConfigurationError" in failed.stop_detail and "fn=42" in failed.stop_detail


WRITER = """
import sys
from closedloop_bench.benchmarks import CompletionCache
from closedloop.models import Completion
cache = CompletionCache(sys.argv[1])
for n in range(int(sys.argv[3])):
    key = f"{sys.argv[2]}-{n}"
    cache.put(key, Completion(text=key, model="m", call_id=key))
    assert cache.get(key) is not None
cache.close()
"""


def test_the_completion_cache_takes_writers_from_several_processes(tmp_path: Path) -> None:
    path = tmp_path / "completions.sqlite"
    CompletionCache(path).close()
    writers = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(path), name, "150"])
        for name in ("a", "b", "c")
    ]
    assert [w.wait(timeout=120) for w in writers] == [0, 0, 0]
    cache = CompletionCache(path)
    try:
        assert len(cache) == 450
        hit = cache.get("b-149")
        assert hit is not None and hit.text == "b-149"
        mode = cache._db.execute("PRAGMA journal_mode").fetchone()[0]
        assert mode == "wal"
    finally:
        cache.close()
