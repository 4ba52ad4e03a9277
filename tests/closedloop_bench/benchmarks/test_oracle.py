"""The oracle bound: hand-built fault tables, a fault log, and a world's own planner."""

from __future__ import annotations

import httpx
import pytest

from closedloop import ConfigurationError
from closedloop_bench.benchmarks import faults_from_log, oracle_verdict
from closedloop_bench.benchmarks._oracle import handover_justified
from closedloop_bench.reference import ReferenceTask, TrajectoryCall, load_tasks
from closedloop_bench.world import (
    FaultPlanner,
    WorldFaultEvent,
    WorldFaultKind,
    load_profile,
    serve_world,
)

TASK = next(
    t for t in load_tasks("eval") if [c.tool for c in t.ideal_trajectory] == ["get_weather"] * 3
)


def table(*faulted: tuple[str, int]) -> object:
    hit = set(faulted)
    return lambda endpoint, index: (endpoint, index) in hit


def test_the_task_under_test_calls_one_endpoint_three_times() -> None:
    assert [c.tool for c in TASK.ideal_trajectory] == ["get_weather"] * 3


def test_no_faults_is_solvable_with_one_request_per_call() -> None:
    verdict = oracle_verdict(TASK, table(), attempts=3)
    assert verdict.solvable and verdict.requests == 3 and verdict.faulted_requests == 0


def test_a_fault_within_the_budget_costs_a_request() -> None:
    verdict = oracle_verdict(TASK, table(("weather", 1)), attempts=2)
    # request 0 answers call 0; request 1 fails, request 2 answers call 1; request 3 call 2
    assert verdict.solvable and verdict.requests == 4 and verdict.faulted_requests == 1


def test_a_call_faulted_on_every_attempt_is_not_solvable() -> None:
    faulted = table(("weather", 1), ("weather", 2), ("weather", 3))
    assert oracle_verdict(TASK, faulted, attempts=4).solvable
    verdict = oracle_verdict(TASK, faulted, attempts=3)
    assert not verdict.solvable and verdict.failed_call == 1 and verdict.requests == 4


def test_faults_on_other_endpoints_do_not_count() -> None:
    assert oracle_verdict(TASK, table(("flights", 0), ("flights", 1)), attempts=1).solvable


def test_a_hand_built_fault_log_ignores_latency_entries() -> None:
    log = [
        WorldFaultEvent(
            request_id="r1", endpoint="weather", index=0, kind=WorldFaultKind.LATENCY, t_s=0
        ),
        WorldFaultEvent(
            request_id="r1", endpoint="weather", index=0, kind=WorldFaultKind.ERROR, t_s=0
        ),
        WorldFaultEvent(
            request_id="r2", endpoint="weather", index=1, kind=WorldFaultKind.SLOW, t_s=0
        ),
        WorldFaultEvent(
            request_id="r3", endpoint="weather", index=2, kind=WorldFaultKind.EMPTY, t_s=0
        ),
    ]
    faulted = faults_from_log(log)
    assert faulted("weather", 0) and not faulted("weather", 1) and faulted("weather", 2)
    assert not oracle_verdict(TASK, faulted, attempts=1).solvable
    assert oracle_verdict(TASK, faulted, attempts=2).solvable


def test_attempts_and_unknown_tools_are_checked() -> None:
    with pytest.raises(ConfigurationError, match="attempts"):
        oracle_verdict(TASK, table(), attempts=0)
    odd = TASK.model_copy(
        update={"ideal_trajectory": (TrajectoryCall(tool="teleport"),), "expected_steps": 1}
    )
    assert isinstance(odd, ReferenceTask)
    with pytest.raises(ConfigurationError, match="teleport"):
        oracle_verdict(odd, table(), attempts=1)


def test_the_planner_agrees_with_what_a_real_world_logs() -> None:
    """The bound is computed without a server; a served world injects the same faults."""
    profile = load_profile("harsh")
    with serve_world(profile, latency_scale=0.0, fault_seed=7) as world:
        with httpx.Client() as client:
            for _ in range(60):
                client.get(f"{world.base_url}/weather", params={"city": "北京"})
        logged = faults_from_log(world.fault_log)
    planner = faults_from_log([])  # nothing logged: nothing faulted
    assert not planner("weather", 0)
    expected = FaultPlanner(profile, 7)
    for index in range(60):
        assert logged("weather", index) == (expected.plan("weather", index).outcome is not None)


@pytest.mark.parametrize(
    ("handed_over", "impossible", "solvable", "expected"),
    [
        (False, True, False, None),
        (True, True, True, True),  # nothing could satisfy it: a human is the right end
        (True, False, False, True),  # no policy could finish it within the budget
        (True, False, True, False),  # solvable: the agent gave up too early
    ],
)
def test_when_a_handover_was_justified(
    handed_over: bool, impossible: bool, solvable: bool, expected: bool | None
) -> None:
    assert (
        handover_justified(handed_over=handed_over, impossible=impossible, solvable=solvable)
        is expected
    )


def test_the_bound_plays_the_regime_chain_per_service() -> None:
    # Every service leaves healthy after its first request, for a long down spell.
    profile = load_profile("regimes").model_copy(
        update={
            "regimes": load_profile("regimes@1").regimes.model_copy(  # type: ignore[union-attr]
                update={"onset_mix": {"down": 1.0}, "dwell": {"down": 50.0}, "worsen": 0.0}
            ),
            "default": load_profile("none").default,
        }
    )
    planner = FaultPlanner(profile, seed=3)
    verdict = oracle_verdict(TASK, planner, attempts=3)
    # Call 0 meets the healthy first request; call 1 meets the spell on all its attempts.
    assert not verdict.solvable and verdict.failed_call == 1 and verdict.requests == 4
    calm = FaultPlanner(load_profile("regimes@0"), seed=3)
    assert oracle_verdict(TASK, calm, attempts=3).faulted_requests <= 1  # 2 % errors only
