"""Every strategy on tiny cells of real worlds (loopback HTTP) with the deterministic model:
each runs, results repeat per seed, and control decides the outcome under faults."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from closedloop.models import CallInfo, FunctionModel, Message
from closedloop_bench.benchmarks import (
    STRATEGY_NAMES,
    EpisodeResult,
    FaultsReport,
    model_source,
    run_faults_bench,
)
from closedloop_bench.world import ENDPOINTS

from .conftest import FakeSleep, first_requests_fail, tiny


def outcome(rows: list[EpisodeResult]) -> list[tuple[object, ...]]:
    return [
        (r.strategy, r.task_id, r.success, r.halt, r.model_calls, r.requests, r.loop_steps)
        for r in rows
    ]


async def test_every_strategy_solves_a_clean_world_with_one_call_per_step(
    sleep: FakeSleep,
) -> None:
    report = await run_faults_bench(tiny(), sleep=sleep)
    assert {r.strategy for r in report.episodes} == set(STRATEGY_NAMES)
    assert len(report.episodes) == len(STRATEGY_NAMES) * 2 * 2
    for row in report.episodes:
        assert row.success, (row.strategy, row.task_id, row.reason, row.error)
        assert row.model_calls == row.steps + 1  # one per ideal call, one final answer
        assert row.oracle_solvable and not row.faults
    assert sleep.delays == []  # nothing failed, nothing waited


async def test_results_repeat_for_the_same_seeds(sleep: FakeSleep) -> None:
    config = tiny(profiles=("seed000",), steps=(3,), episodes=3, seed=11)
    first = await run_faults_bench(config, sleep=sleep)
    second = await run_faults_bench(config, sleep=sleep)
    assert outcome(first.episodes) == outcome(second.episodes)
    assert [r.faults for r in first.episodes] == [r.faults for r in second.episodes]
    other = await run_faults_bench(tiny(profiles=("seed000",), steps=(3,), episodes=3, seed=12))
    assert [r.fault_seed for r in other.episodes] != [r.fault_seed for r in first.episodes]


async def fail_first(tmp_path: Path, sleep: FakeSleep, count: int) -> FaultsReport:
    profile = first_requests_fail(tmp_path, *ENDPOINTS, count=count)
    return await run_faults_bench(tiny(profiles=(profile,), steps=(1, 2, 3)), sleep=sleep)


async def test_open_loop_fails_where_retries_succeed(tmp_path: Path, sleep: FakeSleep) -> None:
    report = await fail_first(tmp_path, sleep, count=1)
    possible = [r for r in report.episodes if not r.impossible]
    assert possible and all(r.oracle_solvable for r in possible)
    by = {name: [r for r in possible if r.strategy == name] for name in STRATEGY_NAMES}
    assert not any(r.success for r in by["open_loop"])
    # The budget row spends no retry while its error is calm, so one outage on an
    # effect's first request (which no rule may repeat) can end its run: it is the row
    # that trades success for requests, and is measured on the success-cost plane.
    budget_rows = {"closedloop_budget", "closedloop_acting", "closedloop_ignoring"}
    for name in [n for n in STRATEGY_NAMES[1:] if n not in budget_rows]:
        assert all(r.success for r in by[name]), [(r.task_id, r.reason) for r in by[name]]
        assert all(r.faults.get("outage", 0) >= 1 for r in by[name])
    budget = by["closedloop_budget"]
    assert sum(r.requests for r in budget) <= sum(r.requests for r in by["closedloop_model_pid"])
    # the closed loop waited its PID-scheduled delay (100 ms at u = 0) before each retry
    assert 0.1 in sleep.delays


async def test_faults_on_every_attempt_beat_every_strategy_and_the_oracle(
    tmp_path: Path, sleep: FakeSleep
) -> None:
    report = await fail_first(tmp_path, sleep, count=3)
    possible = [r for r in report.episodes if not r.impossible]
    assert possible and not any(r.oracle_solvable for r in possible)
    assert not any(r.success for r in possible)
    for row in report.episodes:
        if row.handed_over:
            assert row.handover_justified is (row.impossible or not row.oracle_solvable)


async def test_fixed_retries_back_off_exponentially(tmp_path: Path, sleep: FakeSleep) -> None:
    profile = first_requests_fail(tmp_path, *ENDPOINTS, count=2)
    config = tiny(
        profiles=(profile,), steps=(1,), episodes=1, backoff_s=0.5, strategies=("fixed_retries",)
    )
    report = await run_faults_bench(config, sleep=sleep)
    (row,) = report.episodes
    # the one call failed twice, then answered: waits of 0.5 s and 1.0 s
    assert sleep.delays == [0.5, 1.0] and row.faults == {"outage": 2}


@pytest.mark.parametrize("name", STRATEGY_NAMES)
async def test_each_strategy_records_its_usage(name: str, sleep: FakeSleep) -> None:
    report = await run_faults_bench(tiny(steps=(2,), episodes=1, strategies=(name,)), sleep=sleep)
    (row,) = report.episodes
    assert row.strategy == name and row.prompt_tokens > 0 and row.requests >= 2
    assert row.latency_s >= 0.0 and row.wall_s >= 0.0


async def test_the_closed_loop_planner_is_react_for_the_test_model(sleep: FakeSleep) -> None:
    report = await run_faults_bench(
        tiny(steps=(1,), episodes=1, strategies=("closedloop_pid",)), sleep=sleep
    )
    assert [r.planner for r in report.episodes] == ["react"]
    baseline = await run_faults_bench(
        tiny(steps=(1,), episodes=1, strategies=("open_loop",)), sleep=sleep
    )
    assert [r.planner for r in baseline.episodes] == ["model"]


async def test_the_reference_planner_runs_the_domain_agent_on_rules_alone(
    sleep: FakeSleep,
) -> None:
    from closedloop_bench.benchmarks._closed import reference_builder

    config = tiny(steps=(1,), episodes=4, strategies=("closedloop_adrc",), closed_loop="reference")
    report = await run_faults_bench(config, sleep=sleep)
    for row in report.episodes:
        expected = "reference" if reference_builder(row.domain) is not None else "react"
        assert row.planner == expected and row.reason
        if expected == "reference":
            assert row.model_calls == 0  # the test model cannot answer the rules' questions


async def test_the_plain_loops_and_langgraph_stop_after_the_same_number_of_calls(
    sleep: FakeSleep,
) -> None:
    """A model that never answers: every baseline makes max_steps calls, then stops."""

    def stubborn(messages: tuple[Message, ...], _call: CallInfo) -> dict[str, object]:
        first = re.search(r"^- (\w+)\(", messages[0].content, re.M)
        assert first is not None
        return {"tool": first.group(1), "arguments": {}}

    source = model_source(FunctionModel(stubborn, name="stubborn"))
    config = tiny(steps=(1,), episodes=2, strategies=("open_loop", "fixed_retries", "langgraph"))
    report = await run_faults_bench(config, source=source, sleep=sleep)
    for row in report.episodes:
        assert not row.success and row.halt == "step_limit", row
        assert row.model_calls == 1 + config.step_slack, row.strategy
