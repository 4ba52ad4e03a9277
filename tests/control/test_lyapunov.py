"""LyapunovMonitor: V, ΔV, the stop rule, best-so-far and the trajectory classes."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from closedloop import ConfigurationError
from closedloop.control import LyapunovMonitor, LyapunovVerdict, Trajectory


def run(scores: list[float], **kwargs: float) -> list[LyapunovVerdict]:
    monitor = LyapunovMonitor(**kwargs)  # type: ignore[arg-type]
    return [monitor.observe(s, payload=f"out{i}") for i, s in enumerate(scores, start=1)]


def test_issue_example() -> None:
    verdicts = run([0.2, 0.5, 0.7, 0.65, 0.9], target=1.0)
    assert [v.round for v in verdicts] == [1, 2, 3, 4, 5]
    assert [v.V for v in verdicts] == pytest.approx([0.32, 0.125, 0.045, 0.06125, 0.005])
    assert verdicts[0].dV is None
    assert [v.dV for v in verdicts[1:]] == pytest.approx([-0.195, -0.08, 0.01625, -0.05625])
    assert [v.increased for v in verdicts] == [False, False, False, True, False]
    assert not any(v.should_stop for v in verdicts)  # a single increase, patience 2
    assert verdicts[-1].best_round == 5
    # One small setback among large gains is still convergence.
    assert verdicts[-1].trajectory is Trajectory.CONVERGING


def test_blind_retry_trajectory() -> None:
    # A blind retry's scores 7 → 8 → 4 → 10 on a 10-point scale: ΔV −2.5, +16, −18.
    monitor = LyapunovMonitor(target=10.0)
    verdicts = [monitor.observe(s) for s in (7, 8, 4, 10)]
    assert [v.dV for v in verdicts[1:]] == pytest.approx([-2.5, 16.0, -18.0])
    assert verdicts[2].increased
    assert verdicts[-1].trajectory is Trajectory.CONVERGED


def test_stops_after_patience_consecutive_increases() -> None:
    verdicts = run([0.8, 0.7, 0.6, 0.5], patience=2)
    assert [v.consecutive_increases for v in verdicts] == [0, 1, 2, 3]
    assert [v.should_stop for v in verdicts] == [False, False, True, True]
    assert verdicts[2].trajectory is Trajectory.DIVERGING


def test_an_improvement_resets_the_count() -> None:
    verdicts = run([0.8, 0.7, 0.9, 0.6, 0.5], patience=2)
    assert [v.consecutive_increases for v in verdicts] == [0, 1, 0, 1, 2]
    assert [v.should_stop for v in verdicts] == [False, False, False, False, True]


def test_patience_one_stops_on_the_first_increase() -> None:
    assert [v.should_stop for v in run([0.5, 0.6, 0.4], patience=1)] == [False, False, True]


def test_best_so_far_keeps_its_payload() -> None:
    monitor = LyapunovMonitor()
    for score, payload in [(0.3, "a"), (0.9, "b"), (0.4, "c"), (0.9, "d")]:
        monitor.observe(score, payload)
    assert monitor.best_round == 2
    assert monitor.best_payload == "b"  # the earliest of the tied best
    assert monitor.best_V == pytest.approx(0.005)
    assert monitor.rounds == 4


def test_target_overshoot_counts_as_distance() -> None:
    # V is symmetric: 1.2 against a target of 1.0 is as far as 0.8.
    verdicts = run([0.8, 1.2], target=1.0)
    assert verdicts[1].dV == pytest.approx(0.0)
    assert not verdicts[1].increased


@pytest.mark.parametrize(
    ("scores", "expected"),
    [
        ([0.2, 0.5, 0.7, 0.9995], Trajectory.CONVERGED),
        ([0.2, 0.4, 0.6, 0.8], Trajectory.CONVERGING),
        ([0.5, 0.5, 0.5, 0.5], Trajectory.STALLING),
        ([0.3, 0.6, 0.3, 0.6, 0.3], Trajectory.OSCILLATING),
        ([0.9, 0.7, 0.75, 0.5], Trajectory.DIVERGING),
        ([0.9, 0.8, 0.6], Trajectory.DIVERGING),
        ([0.5, 0.6, 0.55], Trajectory.STALLING),  # one step up, one down: no net, no rhythm
    ],
)
def test_trajectory_classes(scores: list[float], expected: Trajectory) -> None:
    assert run(scores)[-1].trajectory is expected


def test_first_round_has_no_trajectory() -> None:
    verdict = run([0.4])[0]
    assert verdict.trajectory is None
    assert verdict.dV is None
    assert not verdict.increased


def test_verdict_is_frozen() -> None:
    verdict = run([0.4])[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        verdict.V = 0.0  # type: ignore[misc]


def test_reset() -> None:
    monitor = LyapunovMonitor()
    first = [monitor.observe(s) for s in (0.2, 0.1, 0.05)]
    monitor.reset()
    assert monitor.rounds == 0
    assert monitor.last is None
    assert monitor.best_round == 0
    assert [monitor.observe(s) for s in (0.2, 0.1, 0.05)] == first
    assert monitor.last == first[-1]


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"target": math.nan}, "target"),
        ({"patience": 0}, "patience"),
        ({"patience": 1.5}, "patience"),
        ({"window": 1}, "window"),
        ({"tolerance": -1.0}, "tolerance"),
        ({"stall_tolerance": math.inf}, "stall_tolerance"),
    ],
)
def test_rejects_bad_settings(kwargs: dict[str, float], argument: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        LyapunovMonitor(**kwargs)  # type: ignore[arg-type]
    assert info.value.argument == argument


def test_rejects_non_finite_scores() -> None:
    monitor = LyapunovMonitor()
    with pytest.raises(ConfigurationError, match="score"):
        monitor.observe(math.nan)
    assert monitor.rounds == 0


scores = st.lists(st.floats(min_value=-2.0, max_value=3.0), min_size=1, max_size=30)


@given(scores, st.floats(min_value=-1.0, max_value=2.0))
def test_best_so_far_is_the_argmin_of_v(values: list[float], target: float) -> None:
    monitor = LyapunovMonitor(target=target)
    for i, s in enumerate(values):
        verdict = monitor.observe(s, payload=i)
    vs = monitor.values
    best = min(range(len(vs)), key=vs.__getitem__)  # first index of the minimum
    assert monitor.best_payload == best
    assert monitor.best_round == best + 1
    assert monitor.best_V == min(vs)
    assert verdict.best_V == min(vs)


@given(scores, st.integers(1, 4))
def test_stop_flag_matches_a_count_of_consecutive_increases(
    values: list[float], patience: int
) -> None:
    monitor = LyapunovMonitor(patience=patience)
    run_length = 0
    for s in values:
        verdict = monitor.observe(s)
        run_length = run_length + 1 if verdict.dV is not None and verdict.dV > 0 else 0
        assert verdict.should_stop == (run_length >= patience)
        assert abs(verdict.V - 0.5 * (1.0 - s) ** 2) <= 1e-12 * (1.0 + verdict.V)
