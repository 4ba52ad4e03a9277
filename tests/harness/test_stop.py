"""Stop policies, each judged on a hand-built state."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from closedloop import ConfigurationError
from closedloop.control import Trajectory
from closedloop.harness import (
    RefineState,
    StopReason,
    stop_after_rounds,
    stop_on_fixed_point,
    stop_on_lyapunov,
    stop_on_trajectory,
    stop_when_target_met,
)
from closedloop.policy import AnyOf


def state(*scores: float | None, target: float = 1.0) -> RefineState:
    return RefineState(round=len(scores), scores=tuple(scores), target=target)


def test_target_met() -> None:
    policy = stop_when_target_met()
    assert policy(state(0.7, 0.9)) is None
    decision = policy(state(0.7, 1.0))
    assert decision is not None and decision.reason is StopReason.TARGET_MET
    assert stop_when_target_met(0.8)(state(0.85)) is not None
    assert policy(state(1.0, None)) is None  # judged on the latest round only


@given(st.lists(st.floats(0.0, 0.999), min_size=1, max_size=8))
def test_target_never_fires_below_target(scores: list[float]) -> None:
    assert stop_when_target_met()(state(*scores)) is None


def test_after_rounds() -> None:
    assert stop_after_rounds(3)(state(0.1, 0.2)) is None
    decision = stop_after_rounds(3)(state(0.1, 0.2, 0.3))
    assert decision is not None and decision.reason is StopReason.MAX_ROUNDS


def test_lyapunov_on_the_measured_trajectories() -> None:
    policy = stop_on_lyapunov(patience=2)
    # Blind retry 7 -> 8 -> 4 -> 10: one rise of V, not two in a row: no stop.
    assert all(
        policy(state(*[s / 10 for s in seq])) is None for seq in ([7, 8], [7, 8, 4], [7, 8, 4, 10])
    )
    # Two consecutive rises stop the run.
    decision = policy(state(0.8, 0.6, 0.4))
    assert decision is not None and decision.reason is StopReason.LYAPUNOV
    assert "2 consecutive" in decision.detail
    assert stop_on_lyapunov(patience=1)(state(0.7, 0.8, 0.4)) is not None


def test_lyapunov_ignores_unevaluated_rounds() -> None:
    policy = stop_on_lyapunov(patience=2)
    assert policy(state(0.8, None, 0.6, None)) is None  # latest round not evaluated
    assert policy(state(0.8, None, 0.6, None, 0.4)) is not None


def test_trajectory() -> None:
    policy = stop_on_trajectory()
    assert policy(state(0.5, 0.5)) is None  # too few evaluated rounds to judge
    decision = policy(state(0.5, 0.5, 0.5))
    assert decision is not None and decision.reason is StopReason.TRAJECTORY
    assert "stalling" in decision.detail
    assert policy(state(0.2, 0.5, 0.7)) is None  # converging
    only_diverging = stop_on_trajectory(classes=frozenset({Trajectory.DIVERGING}))
    assert only_diverging(state(0.5, 0.5, 0.5)) is None
    assert only_diverging(state(0.9, 0.6, 0.3)) is not None


def test_scores_above_a_lower_target_count_as_reached() -> None:
    # V uses min(score, target): passing more than the target is not a rise of V.
    assert stop_on_lyapunov()(state(0.8, 0.9, 1.0, target=0.8)) is None


def test_combination_reports_the_first_policy_that_fires() -> None:
    policy = stop_when_target_met() | stop_on_lyapunov() | stop_after_rounds(3)
    assert isinstance(policy, AnyOf) and len(policy.parts) == 3
    assert policy(state(0.1, 0.2)) is None
    d = policy(state(0.1, 0.2, 1.0))
    assert d is not None and d.reason is StopReason.TARGET_MET
    d = policy(state(0.1, 0.2, 0.3))
    assert d is not None and d.reason is StopReason.MAX_ROUNDS


def test_bad_policy_arguments() -> None:
    with pytest.raises(ConfigurationError, match="rounds"):
        stop_after_rounds(0)
    with pytest.raises(ConfigurationError, match="patience"):
        stop_on_lyapunov(0)
    with pytest.raises(ConfigurationError, match="classes"):
        stop_on_trajectory(classes=frozenset())
    with pytest.raises(ValueError):
        stop_on_trajectory(classes=frozenset({"sideways"}))  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="target"):
        stop_when_target_met(float("nan"))


def test_fixed_point_fires_only_on_the_refiners_finding() -> None:
    policy = stop_on_fixed_point()
    assert policy(state(0.5, 0.5)) is None  # equal scores alone are no fixed point
    decision = policy(RefineState(round=2, scores=(0.5, 0.5), fixed_point=True))
    assert decision is not None and decision.reason is StopReason.FIXED_POINT
    assert "round 2" in decision.detail
    combined = stop_when_target_met() | stop_on_fixed_point()
    met = combined(RefineState(round=2, scores=(0.5, 1.0), fixed_point=True))
    assert met is not None and met.reason is StopReason.TARGET_MET
