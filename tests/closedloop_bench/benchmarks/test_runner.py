"""Planning the jobs: episodes by cell, every strategy on the same fault seed, domains in
turn, repetitions with fresh seeds; and the configuration's checks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from closedloop import ConfigurationError
from closedloop_bench.benchmarks import STRATEGY_NAMES, FaultsConfig, plan_jobs
from closedloop_bench.benchmarks._runner import fault_seed
from closedloop_bench.reference import load_tasks

TASKS = load_tasks("eval")


def test_every_strategy_meets_the_same_episode_and_fault_seed() -> None:
    jobs = plan_jobs(FaultsConfig(steps=(1,), episodes=4), TASKS)
    k = len(STRATEGY_NAMES)
    assert len(jobs) == 4 * k
    for n in range(4):
        group = jobs[n * k : n * k + k]
        assert [j.strategy for j in group] == list(STRATEGY_NAMES)
        assert len({(j.task_id, j.fault_seed) for j in group}) == 1
    domains = [next(t.domain for t in TASKS if t.id == j.task_id) for j in jobs[::k]]
    assert sorted(domains) == ["flight", "meeting", "report", "weather"]


def test_more_episodes_than_tasks_repeat_them_with_new_seeds() -> None:
    pool = [t for t in TASKS if t.expected_steps == 7]
    jobs = plan_jobs(
        FaultsConfig(steps=(7,), episodes=len(pool) + 2, strategies=("open_loop",)), TASKS
    )
    assert [j.repetition for j in jobs].count(1) == 2
    first = {j.task_id: j.fault_seed for j in jobs if j.repetition == 0}
    again = [j for j in jobs if j.repetition == 1]
    assert all(first[j.task_id] != j.fault_seed for j in again)


def test_a_profile_file_draws_the_same_faults_from_any_directory(tmp_path: Path) -> None:
    def seeds(profile: str) -> list[int]:
        config = FaultsConfig(
            steps=(3,), episodes=3, strategies=("open_loop",), profiles=(profile,)
        )
        return [j.fault_seed for j in plan_jobs(config, TASKS)]

    paths = []
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        paths.append(tmp_path / folder / "busy.json")
        paths[-1].write_text(json.dumps({"regimes": {"onset_rate": 0.5}}))
    assert seeds(str(paths[0])) == seeds(str(paths[1]))  # keyed by the name "busy", not the path
    named = tmp_path / "a" / "named.json"
    named.write_text(json.dumps({"name": "busy", "regimes": {"onset_rate": 0.1}}))
    assert seeds(str(named)) == seeds(str(paths[0]))  # a name the file gives wins over its stem
    # Built-in names key the seeds as before (results already on file stay reproducible).
    harsh = plan_jobs(FaultsConfig(steps=(3,), episodes=1, profiles=("harsh",)), TASKS)[0]
    assert harsh.fault_seed == fault_seed(0, "harsh", harsh.task_id, 0)
    assert seeds("regimes@0.2") != seeds("regimes@0.3")


def test_the_whole_split_is_the_default_and_the_quick_preset_is_small() -> None:
    everything = plan_jobs(FaultsConfig(strategies=("open_loop",)), TASKS)
    assert sorted(j.task_id for j in everything) == sorted(t.id for t in TASKS)
    quick = FaultsConfig.quick_preset()
    assert quick.quick and quick.steps == (1, 3, 5, 7) and quick.episodes == 3
    real = FaultsConfig.quick_preset(model="local:qwen2.5-coder-0.5b")
    assert real.episodes == 1 and real.step_slack == 1


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("strategies", ("magic",)),
        ("steps", (0,)),
        ("steps", (11,)),
        ("episodes", 0),
        ("split", "train"),
        ("concurrency", 0),
        ("attempts", 0),
        ("closed_loop", "psychic"),
        ("latency_scale", -1.0),
    ],
)
def test_bad_settings_name_themselves(option: str, value: object) -> None:
    with pytest.raises(ConfigurationError, match=option):
        FaultsConfig(**{option: value})  # type: ignore[arg-type]
