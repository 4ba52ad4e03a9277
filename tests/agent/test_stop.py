"""Stop policies: each one a pure function of a hand-built LoopState; | and & compose them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from closedloop import ConfigurationError
from closedloop.agent import (
    HaltReason,
    LoopState,
    StopAll,
    StopAny,
    StopPolicy,
    StopWhen,
    stop_after_delay,
    stop_after_steps,
    stop_never,
    stop_on_budget,
    stop_on_no_progress,
    stop_on_repeats,
)
from closedloop.agent._stop import halt_reason


def test_each_policy_fires_at_its_limit_and_not_before() -> None:
    assert stop_after_steps(3)(LoopState(step=2)) is None
    assert stop_after_steps(3)(LoopState(step=3)) is HaltReason.STEP_LIMIT
    assert stop_after_delay(120)(LoopState(elapsed_s=119.9)) is None
    # the algebra's delay names its reason by value; the run reads it as the enum
    assert stop_after_delay(120)(LoopState(elapsed_s=120.0)) == HaltReason.DEADLINE
    assert halt_reason(stop_after_delay(120)(LoopState(elapsed_s=120.0))) is HaltReason.DEADLINE
    assert stop_on_no_progress(3)(LoopState(no_progress_steps=2)) is None
    assert stop_on_no_progress(3)(LoopState(no_progress_steps=3)) is HaltReason.NO_PROGRESS
    assert stop_on_repeats(2)(LoopState(repeat_count=1)) is None
    assert stop_on_repeats(2)(LoopState(repeat_count=2)) is HaltReason.REPEATED_ACTION
    assert stop_on_budget(tokens=100)(LoopState(tokens=99)) is None
    assert stop_on_budget(tokens=100)(LoopState(tokens=100)) is HaltReason.BUDGET
    assert stop_on_budget(cost=0.5)(LoopState(cost=0.49)) is None
    assert stop_on_budget(cost=0.5)(LoopState(cost=0.5)) is HaltReason.BUDGET
    assert stop_never()(LoopState(step=10**6, elapsed_s=1e9)) is None


def test_a_verdict_outside_the_halt_reasons_is_named() -> None:
    assert halt_reason(None) is None
    with pytest.raises(ConfigurationError, match="attempts"):
        halt_reason("attempts")


def test_or_names_the_first_part_that_fires() -> None:
    policy = stop_after_steps(12) | stop_after_delay(120) | stop_on_no_progress(3)
    assert isinstance(policy, StopAny)
    assert len(policy.parts) == 3  # flattened, not nested
    assert policy(LoopState(step=1)) is None
    assert policy(LoopState(step=1, no_progress_steps=3)) is HaltReason.NO_PROGRESS
    assert policy(LoopState(step=12, no_progress_steps=3)) is HaltReason.STEP_LIMIT


def test_and_fires_only_when_every_part_fires() -> None:
    policy = stop_after_steps(5) & stop_on_no_progress(2)
    assert isinstance(policy, StopAll)
    assert policy(LoopState(step=5)) is None
    assert policy(LoopState(no_progress_steps=2)) is None
    assert policy(LoopState(step=5, no_progress_steps=2)) is HaltReason.STEP_LIMIT


def test_plain_callables_compose_and_may_return_a_reason() -> None:
    def too_expensive(state: LoopState) -> bool:
        return state.cost > 1.0

    def diverging(state: LoopState) -> HaltReason | None:
        return HaltReason.NO_PROGRESS if state.f_est > 0.9 else None

    policy = stop_after_steps(10) | too_expensive | diverging
    assert policy(LoopState(cost=0.5, f_est=0.1)) is None
    assert policy(LoopState(cost=2.0)) is HaltReason.CANCELLED  # True from user code
    assert policy(LoopState(f_est=0.95)) is HaltReason.NO_PROGRESS
    left = too_expensive | stop_after_steps(1)  # a callable on the left works too
    assert left(LoopState(step=1)) is HaltReason.STEP_LIMIT


def test_a_callable_returning_nonsense_is_a_configuration_error() -> None:
    policy = StopWhen(lambda s: "stop please")  # type: ignore[arg-type, return-value]
    with pytest.raises(ConfigurationError, match="stop"):
        policy(LoopState())


def test_policies_are_frozen_values_with_equality() -> None:
    assert stop_after_steps(3) == stop_after_steps(3)
    assert stop_after_steps(3) != stop_after_steps(4)
    assert "12" in repr(stop_after_steps(12))
    with pytest.raises(AttributeError):
        stop_after_steps(3).attempts = 4  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "build",
    [
        lambda: stop_after_steps(0),
        lambda: stop_after_delay(-1),
        lambda: stop_on_no_progress(0),
        lambda: stop_on_repeats(0),
        lambda: stop_on_budget(),
        lambda: stop_on_budget(tokens=0),
    ],
)
def test_bad_limits_name_the_argument(build: object) -> None:
    with pytest.raises(ConfigurationError):
        build()  # type: ignore[operator]


def test_max_delay_is_the_earliest_deadline_of_an_or() -> None:
    assert (stop_after_steps(3) | stop_after_delay(30) | stop_after_delay(10)).max_delay_s() == 10
    assert stop_after_steps(3).max_delay_s() is None
    assert (stop_after_delay(5) & stop_after_steps(2)).max_delay_s() is None


states = st.builds(
    LoopState,
    step=st.integers(0, 30),
    elapsed_s=st.floats(0, 300),
    tokens=st.integers(0, 10_000),
    no_progress_steps=st.integers(0, 6),
    repeat_count=st.integers(0, 4),
)
policies = st.sampled_from(
    [
        stop_after_steps(12),
        stop_after_delay(120),
        stop_on_no_progress(3),
        stop_on_repeats(2),
        stop_on_budget(tokens=5000),
    ]
)


@given(states, policies, policies)
def test_or_and_and_are_any_and_all(state: LoopState, a: StopPolicy, b: StopPolicy) -> None:
    either = (a | b)(state)
    both = (a & b)(state)
    assert (either is not None) == (a(state) is not None or b(state) is not None)
    assert (both is not None) == (a(state) is not None and b(state) is not None)
    if a(state) is not None:
        assert either is a(state)
