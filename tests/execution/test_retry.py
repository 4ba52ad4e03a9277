"""The executor's retry strategies are pure functions of a hand-built state: no sleeping.

They are the shared policy algebra; the old execution names stay as aliases for a release.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

import closedloop.execution as execution
from closedloop import ConfigurationError
from closedloop.policy import (
    AllOf,
    AnyOf,
    PolicyState,
    RetryPolicy,
    Verdict,
    WaitSum,
    retry_if_exception,
    retry_if_exception_type,
    retry_never,
    stop_after_attempt,
    stop_after_backoff,
    wait_exponential,
    wait_fixed,
    wait_jitter,
    wait_random,
)


def state(
    attempt: int, *, error: BaseException | None = None, slept: float = 0.0, seed: int = 0
) -> PolicyState:
    return PolicyState(
        attempt=attempt,
        error=error or OSError("boom"),
        slept_s=slept,
        rng=random.Random(seed),
    )


def test_stop_after_attempt_counts_attempts() -> None:
    stop = stop_after_attempt(3)
    assert [stop(state(n)) is not None for n in (1, 2, 3, 4)] == [False, False, True, True]


def test_stop_after_backoff_is_a_budget_of_waiting() -> None:
    stop = stop_after_backoff(1.0)
    assert stop(state(5, slept=0.99)) is None
    assert stop(state(1, slept=1.0)) is not None


def test_stops_compose_with_or_and_and() -> None:
    either = stop_after_attempt(5) | stop_after_backoff(1.0)
    both = stop_after_attempt(5) & stop_after_backoff(1.0)
    assert isinstance(either, AnyOf) and isinstance(both, AllOf)
    assert either(state(2, slept=2.0)) is not None and both(state(2, slept=2.0)) is None
    assert both(state(5, slept=2.0)) is not None
    # Chains flatten instead of nesting.
    assert len((either | stop_after_attempt(9)).parts) == 3


@given(
    attempt=st.integers(min_value=1, max_value=10_000),
    initial=st.floats(min_value=0.0, max_value=10.0),
    multiplier=st.floats(min_value=1.0, max_value=10.0),
    cap=st.floats(min_value=0.0, max_value=100.0),
)
def test_exponential_is_monotone_and_capped(
    attempt: int, initial: float, multiplier: float, cap: float
) -> None:
    wait = wait_exponential(initial, multiplier, cap)
    now, after = wait(state(attempt)), wait(state(attempt + 1))
    assert 0.0 <= now <= cap
    assert after >= now


def test_exponential_doubles_until_the_cap() -> None:
    wait = wait_exponential(initial_s=0.5, multiplier=2.0, max_s=3.0)
    assert [wait(state(n)) for n in range(1, 6)] == [0.5, 1.0, 2.0, 3.0, 3.0]


@given(seed=st.integers(min_value=0, max_value=2**32), attempt=st.integers(1, 50))
def test_jitter_stays_in_bounds_and_is_reproducible_from_the_seed(seed: int, attempt: int) -> None:
    wait = wait_exponential(0.1, 2.0, 5.0) + wait_random(0.0, 0.25)
    first = wait(state(attempt, seed=seed))
    base = wait_exponential(0.1, 2.0, 5.0)(state(attempt))
    assert base <= first <= base + 0.25
    assert wait(state(attempt, seed=seed)) == first  # same seed, same delay


def test_full_jitter_draws_below_its_base() -> None:
    wait = wait_jitter(wait_fixed(2.0))
    draws = [wait(state(1, seed=s)) for s in range(50)]
    assert all(0.0 <= d <= 2.0 for d in draws)
    assert len(set(draws)) > 40  # actually random, not a constant


def test_waits_sum_and_flatten() -> None:
    total = wait_fixed(1.0) + wait_fixed(0.5) + wait_fixed(0.25)
    assert isinstance(total, WaitSum) and len(total.parts) == 3
    assert total(state(1)) == 1.75


def test_retry_if_exception_type_skips_programming_errors() -> None:
    retry = retry_if_exception_type()
    assert retry(state(1, error=OSError())) == "OSError"
    assert retry(state(1, error=KeyError("x"))) == "KeyError"
    assert retry(state(1, error=TypeError())) is None
    assert retry(state(1, error=ConfigurationError("a", 1, "bad"))) is None
    narrow = retry_if_exception_type(TimeoutError)
    assert narrow(state(1, error=TimeoutError())) is not None
    assert narrow(state(1, error=OSError("not a timeout"))) is None


def test_retry_conditions_compose() -> None:
    transient = retry_if_exception(lambda e: "transient" in str(e))
    combined = retry_if_exception_type(KeyError) | transient
    assert combined(state(1, error=KeyError())) is not None
    assert combined(state(1, error=OSError("transient"))) is not None
    assert combined(state(1, error=OSError("x"))) is None
    both = retry_if_exception_type(OSError) & transient
    assert both(state(1, error=OSError("transient"))) is not None
    assert both(state(1, error=OSError("permanent"))) is None
    assert retry_never()(state(1)) is None


def test_policy_combines_stop_and_retry_condition() -> None:
    policy = RetryPolicy.exponential(3, initial_s=1.0, jitter_s=0.0, retry_on=(OSError,))
    assert policy.should_retry(state(1)) and policy.should_retry(state(2))
    assert not policy.should_retry(state(3))
    assert not policy.should_retry(state(1, error=ValueError("not retryable")))
    assert [policy.delay(state(n)) for n in (1, 2)] == [1.0, 2.0]
    assert not RetryPolicy.none().should_retry(state(1))
    assert policy.decide(state(2)).verdict is Verdict.WAIT
    assert policy.decide(state(2)).delay_s == 2.0
    gave_up = policy.decide(state(3))
    assert gave_up.verdict is Verdict.STOP and gave_up.reason == "attempts"


def test_policies_are_values() -> None:
    assert RetryPolicy.exponential(3) == RetryPolicy.exponential(3)
    assert RetryPolicy.exponential(3) != RetryPolicy.exponential(4)
    with pytest.raises(AttributeError):
        RetryPolicy().stop = stop_after_attempt(9)  # type: ignore[misc]


def test_the_old_execution_names_are_aliases_of_the_algebra() -> None:
    assert execution.StopAfterAttempt is stop_after_attempt
    assert execution.StopAfterDelay is stop_after_backoff
    assert execution.RetryIfException is retry_if_exception_type
    assert execution.WaitFullJitter is wait_jitter
    assert execution.StopAny is execution.RetryIfAny is AnyOf
    assert execution.RetryState is PolicyState
    # Positional construction, as the agent's read loop builds it, still works.
    policy = execution.RetryPolicy(
        execution.StopAfterAttempt(2), execution.WaitFixed(0.5), execution.RetryIfException()
    )
    assert policy.should_retry(state(1)) and not policy.should_retry(state(2))


@pytest.mark.parametrize(
    ("factory", "argument"),
    [
        (lambda: stop_after_attempt(0), "attempts"),
        (lambda: stop_after_backoff(-1.0), "seconds"),
        (lambda: wait_fixed(float("nan")), "seconds"),
        (lambda: wait_random(2.0, 1.0), "min_s"),
        (lambda: wait_exponential(multiplier=0.0), "multiplier"),
        (lambda: retry_if_exception_type(42), "types"),  # type: ignore[arg-type]
        (lambda: RetryPolicy(stop=42), "stop"),  # type: ignore[arg-type]
    ],
)
def test_bad_strategy_arguments_are_named(factory, argument: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        factory()
    assert info.value.argument == argument
