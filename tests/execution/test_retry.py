"""Retry strategies are pure functions of a hand-built state: no sleeping anywhere."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from closedloop import ConfigurationError
from closedloop.execution import (
    RetryIfException,
    RetryIfPredicate,
    RetryNever,
    RetryPolicy,
    RetryState,
    StopAfterAttempt,
    StopAfterDelay,
    StopAll,
    StopAny,
    WaitExponential,
    WaitFixed,
    WaitFullJitter,
    WaitRandom,
    WaitSum,
)


def state(attempt: int, *, error: BaseException | None = None, slept: float = 0.0, seed: int = 0):
    return RetryState(attempt, error or OSError("boom"), slept, random.Random(seed))


def test_stop_after_attempt_counts_attempts() -> None:
    stop = StopAfterAttempt(3)
    assert [stop(state(n)) for n in (1, 2, 3, 4)] == [False, False, True, True]


def test_stop_after_delay_is_a_backoff_budget() -> None:
    stop = StopAfterDelay(1.0)
    assert not stop(state(5, slept=0.99))
    assert stop(state(1, slept=1.0))


def test_stops_compose_with_or_and_and() -> None:
    either = StopAfterAttempt(5) | StopAfterDelay(1.0)
    both = StopAfterAttempt(5) & StopAfterDelay(1.0)
    assert isinstance(either, StopAny) and isinstance(both, StopAll)
    assert either(state(2, slept=2.0)) and not both(state(2, slept=2.0))
    assert both(state(5, slept=2.0))
    # Chains flatten instead of nesting.
    assert len((either | StopAfterAttempt(9)).parts) == 3


@given(
    attempt=st.integers(min_value=1, max_value=10_000),
    initial=st.floats(min_value=0.0, max_value=10.0),
    multiplier=st.floats(min_value=1.0, max_value=10.0),
    cap=st.floats(min_value=0.0, max_value=100.0),
)
def test_exponential_is_monotone_and_capped(
    attempt: int, initial: float, multiplier: float, cap: float
) -> None:
    wait = WaitExponential(initial, multiplier, cap)
    now, after = wait(state(attempt)), wait(state(attempt + 1))
    assert 0.0 <= now <= cap
    assert after >= now


def test_exponential_doubles_until_the_cap() -> None:
    wait = WaitExponential(initial_s=0.5, multiplier=2.0, max_s=3.0)
    assert [wait(state(n)) for n in range(1, 6)] == [0.5, 1.0, 2.0, 3.0, 3.0]


@given(seed=st.integers(min_value=0, max_value=2**32), attempt=st.integers(1, 50))
def test_jitter_stays_in_bounds_and_is_reproducible_from_the_seed(seed: int, attempt: int) -> None:
    wait = WaitExponential(0.1, 2.0, 5.0) + WaitRandom(0.0, 0.25)
    first = wait(state(attempt, seed=seed))
    base = WaitExponential(0.1, 2.0, 5.0)(state(attempt))
    assert base <= first <= base + 0.25
    assert wait(state(attempt, seed=seed)) == first  # same seed, same delay


def test_full_jitter_draws_below_its_base() -> None:
    wait = WaitFullJitter(WaitFixed(2.0))
    draws = [wait(state(1, seed=s)) for s in range(50)]
    assert all(0.0 <= d <= 2.0 for d in draws)
    assert len(set(draws)) > 40  # actually random, not a constant


def test_waits_sum_and_flatten() -> None:
    total = WaitFixed(1.0) + WaitFixed(0.5) + WaitFixed(0.25)
    assert isinstance(total, WaitSum) and len(total.parts) == 3
    assert total(state(1)) == 1.75


def test_retry_if_exception_skips_programming_errors() -> None:
    retry = RetryIfException()
    assert retry(OSError()) and retry(KeyError("x"))
    assert not retry(TypeError()) and not retry(ConfigurationError("a", 1, "bad"))
    narrow = RetryIfException(TimeoutError)
    assert narrow(TimeoutError()) and not narrow(OSError("not a timeout"))


def test_retry_predicates_compose() -> None:
    transient = RetryIfPredicate(lambda e: "transient" in str(e))
    combined = RetryIfException(KeyError) | transient
    assert combined(KeyError()) and combined(OSError("transient")) and not combined(OSError("x"))
    both = RetryIfException(OSError) & transient
    assert both(OSError("transient")) and not both(OSError("permanent"))
    assert not RetryNever()(OSError())


def test_policy_combines_stop_and_predicate() -> None:
    policy = RetryPolicy.exponential(3, initial_s=1.0, jitter_s=0.0, retry_on=(OSError,))
    assert policy.should_retry(state(1)) and policy.should_retry(state(2))
    assert not policy.should_retry(state(3))
    assert not policy.should_retry(state(1, error=ValueError("not retryable")))
    assert [policy.delay(state(n)) for n in (1, 2)] == [1.0, 2.0]
    assert not RetryPolicy.none().should_retry(state(1))


def test_policies_are_values() -> None:
    assert RetryPolicy.exponential(3) == RetryPolicy.exponential(3)
    assert RetryPolicy.exponential(3) != RetryPolicy.exponential(4)
    with pytest.raises(AttributeError):
        RetryPolicy().stop = StopAfterAttempt(9)  # type: ignore[misc]


@pytest.mark.parametrize(
    ("factory", "argument"),
    [
        (lambda: StopAfterAttempt(0), "attempts"),
        (lambda: StopAfterDelay(-1.0), "max_slept_s"),
        (lambda: WaitFixed(float("nan")), "seconds"),
        (lambda: WaitRandom(2.0, 1.0), "min_s"),
        (lambda: WaitExponential(multiplier=0.0), "multiplier"),
        (lambda: RetryIfException(42), "types"),  # type: ignore[arg-type]
    ],
)
def test_bad_strategy_arguments_are_named(factory, argument: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        factory()
    assert info.value.argument == argument
