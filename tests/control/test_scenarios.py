"""The reference scenarios behind ``closedloop demo control`` stay inside the issue's bands."""

from __future__ import annotations

import pytest

from closedloop.control._scenarios import ScenarioResult, reference_scenarios, run_scenario


@pytest.fixture(scope="module")
def results() -> dict[str, ScenarioResult]:
    return {s.name: run_scenario(s) for s in reference_scenarios()}


def test_anti_windup_ordering_and_bands(results: dict[str, ScenarioResult]) -> None:
    over = {
        k: results[f"pid-{k}"].metrics.overshoot_pct
        for k in ("none", "clamp", "conditional", "backcalc")
    }
    assert 12.0 <= over["none"] <= 22.0
    assert 3.0 <= over["clamp"] <= 9.0
    assert over["conditional"] <= 0.1
    assert over["backcalc"] < 1.0
    assert over["none"] > over["clamp"] > over["backcalc"] >= over["conditional"]


def test_ladrc_first_order(results: dict[str, ScenarioResult]) -> None:
    r = results["ladrc-1st"]
    assert r.metrics.overshoot_pct < 0.01
    assert 0.85 <= r.metrics.settling_time <= 1.2
    assert r.disturbance_dip is not None and r.disturbance_dip < 0.03
    assert r.recovered is True
    assert r.recovery_time is not None and r.recovery_time < 1.0


def test_ladrc_rejects_disturbance_better_than_same_bandwidth_pid(
    results: dict[str, ScenarioResult],
) -> None:
    ladrc, pid = results["ladrc-1st"], results["pid-1st"]
    assert ladrc.disturbance_dip is not None and pid.disturbance_dip is not None
    assert ladrc.disturbance_dip < pid.disturbance_dip / 2


def test_ladrc_second_order(results: dict[str, ScenarioResult]) -> None:
    r = results["ladrc-2nd"]
    assert r.metrics.overshoot_pct < 0.5
    assert 1.5 <= r.metrics.settling_time <= 2.1
    assert r.metrics.steady_state_error < 1e-3


def test_trajectories_are_sampled_at_h(results: dict[str, ScenarioResult]) -> None:
    r = results["ladrc-2nd"]
    assert len(r.t) == len(r.y) == len(r.u)
    assert r.t[1] - r.t[0] == pytest.approx(r.scenario.h)
