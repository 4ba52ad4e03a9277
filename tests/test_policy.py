"""The one policy algebra: laws of | & +, the limits of each strategy, and the two drivers.

Every strategy is judged on a hand-built PolicyState; the drivers get a recording sleep and
a fake clock, so nothing here waits.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from closedloop import ConfigurationError
from closedloop.policy import (
    AllOf,
    AnyOf,
    Policy,
    PolicyDecision,
    PolicyState,
    Retried,
    RetryPolicy,
    Verdict,
    WaitSum,
    retry_async,
    retry_if_exception,
    retry_if_exception_type,
    retry_if_result,
    retry_never,
    retry_sync,
    stop_after_attempt,
    stop_after_backoff,
    stop_after_delay,
    stop_never,
    stop_on_fact,
    wait_exponential,
    wait_fact,
    wait_fixed,
    wait_jitter,
    wait_none,
    wait_random,
    when,
)

# --- the algebra's laws --------------------------------------------------------------------

states = st.builds(
    PolicyState,
    attempt=st.integers(0, 20),
    elapsed_s=st.floats(0, 100, allow_nan=False),
    slept_s=st.floats(0, 10, allow_nan=False),
    facts=st.fixed_dictionaries({"n": st.integers(0, 10), "cost": st.floats(0, 5)}),
)
stops = st.one_of(
    st.builds(stop_after_attempt, st.integers(1, 20)),
    st.builds(stop_after_delay, st.floats(0, 100, allow_nan=False)),
    st.builds(stop_after_backoff, st.floats(0, 10, allow_nan=False)),
    st.builds(stop_on_fact, st.just("n"), st.integers(0, 10)),
    st.builds(stop_on_fact, st.just("cost"), st.floats(0, 5)),
    st.just(stop_never()),
)


def fired(policy: Policy[Any], state: PolicyState) -> bool:
    return policy(state) is not None


@given(states, stops, stops, stops)
def test_or_and_and_are_associative(state: PolicyState, a: Any, b: Any, c: Any) -> None:
    assert ((a | b) | c)(state) == (a | (b | c))(state)
    assert ((a & b) & c)(state) == (a & (b & c))(state)
    # Chains flatten, so both groupings are the same value.
    assert (a | b) | c == a | (b | c)
    assert (a & b) & c == a & (b & c)


@given(states, stops, stops)
def test_or_is_any_and_and_is_all(state: PolicyState, a: Any, b: Any) -> None:
    assert fired(a | b, state) == (fired(a, state) or fired(b, state))
    assert fired(a & b, state) == (fired(a, state) and fired(b, state))
    assert fired(a | b, state) == fired(b | a, state)  # same verdict, maybe another reason
    if fired(a, state):
        assert (a | b)(state) == a(state)  # the first part that fires names the reason


@given(states, stops)
def test_stop_never_is_the_neutral_element_of_or(state: PolicyState, a: Any) -> None:
    assert (a | stop_never())(state) == a(state)
    assert not fired(a & stop_never(), state)


@given(st.integers(1, 50), st.integers(0, 60))
def test_stop_after_attempt_fires_exactly_from_its_limit(limit: int, attempt: int) -> None:
    assert fired(stop_after_attempt(limit), PolicyState(attempt=attempt)) == (attempt >= limit)


@given(st.floats(0, 1e6), st.floats(0, 1e6))
def test_delays_fire_exactly_from_their_limit(limit: float, value: float) -> None:
    assert fired(stop_after_delay(limit), PolicyState(elapsed_s=value)) == (value >= limit)
    assert fired(stop_after_backoff(limit), PolicyState(slept_s=value)) == (value >= limit)


def test_a_missing_or_unknown_fact_never_fires() -> None:
    policy = stop_on_fact("cost", 1.0)
    assert policy(PolicyState()) is None
    assert policy(PolicyState(facts={"cost": float("inf")})) is None
    assert policy(PolicyState(facts={"cost": 1.0})) == "limit"


@given(
    st.lists(st.floats(0, 10), min_size=1, max_size=5),
    st.integers(1, 30),
    st.integers(0, 2**31),
)
def test_waits_add_up_and_stay_in_their_bounds(fixed: list[float], attempt: int, seed: int) -> None:
    total = wait_none()
    for seconds in fixed:
        total = total + wait_fixed(seconds)
    state = PolicyState(attempt=attempt, rng=random.Random(seed))
    assert isinstance(total, WaitSum) and len(total.parts) == len(fixed) + 1
    assert total(state) == pytest.approx(sum(fixed))
    jittered = wait_jitter(wait_exponential(0.1, 2.0, 4.0))(state)
    assert 0.0 <= jittered <= 4.0
    assert 1.0 <= wait_random(1.0, 2.0)(state) <= 2.0


def test_wait_fact_reads_the_scheduled_delay() -> None:
    assert wait_fact("delay_s")(PolicyState(facts={"delay_s": 0.4})) == 0.4
    assert wait_fact("delay_s", 1.5)(PolicyState()) == 1.5


def test_max_delay_is_the_earliest_deadline_of_an_or_only() -> None:
    either = stop_after_attempt(3) | stop_after_delay(30) | stop_after_delay(10)
    assert either.max_delay_s() == 10
    assert stop_after_attempt(3).max_delay_s() is None
    assert (stop_after_delay(5) & stop_after_attempt(2)).max_delay_s() is None


# --- conditions and plain callables ---------------------------------------------------------


def test_retry_conditions_read_the_error_or_the_result() -> None:
    boom = PolicyState(attempt=1, error=OSError("boom"))
    empty = PolicyState(attempt=1, outcome="")
    assert retry_if_exception_type(OSError)(boom) == "OSError"
    assert retry_if_exception_type(OSError)(empty) is None
    assert retry_if_exception_type()(PolicyState(error=TypeError())) is None  # a bug
    assert retry_if_exception(lambda e: "boom" in str(e))(boom) == "OSError"
    assert retry_if_result(lambda r: r == "")(empty) == "result"
    assert retry_if_result(lambda r: r == "")(boom) is None  # a raise is not a result
    assert retry_never()(boom) is None


def test_a_plain_callable_composes_and_true_means_cancelled() -> None:
    policy = stop_after_attempt(5) | (lambda s: s.fact("cost", 0) > 1)
    assert isinstance(policy, AnyOf) and isinstance(policy.parts[1], when)
    assert policy(PolicyState(facts={"cost": 2})) == "cancelled"
    left = (lambda s: False) & stop_after_attempt(1)
    assert isinstance(left, AllOf) and left(PolicyState(attempt=3)) is None
    assert when(lambda s: "custom")(PolicyState()) == "custom"
    with pytest.raises(ConfigurationError) as info:
        stop_after_attempt(2) | 42  # type: ignore[operator]
    assert info.value.argument == "policy"


def test_strategies_are_frozen_values() -> None:
    assert stop_after_attempt(3) == stop_after_attempt(3) != stop_after_attempt(4)
    assert "attempts=3" in repr(stop_after_attempt(3))
    assert RetryPolicy() == RetryPolicy()
    with pytest.raises(AttributeError):
        stop_after_attempt(3).attempts = 4  # type: ignore[misc]


@pytest.mark.parametrize(
    ("build", "argument"),
    [
        (lambda: stop_after_attempt(0), "attempts"),
        (lambda: stop_after_delay(-1), "seconds"),
        (lambda: stop_on_fact("", 1), "name"),
        (lambda: wait_random(3, 1), "min_s"),
        (lambda: AnyOf(()), "parts"),
        (lambda: when(42), "fn"),  # type: ignore[arg-type]
        (lambda: RetryPolicy(wait=stop_never()), "wait"),  # type: ignore[arg-type]
    ],
)
def test_bad_arguments_name_themselves(build: Any, argument: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        build()
    assert info.value.argument == argument


# --- one decision -------------------------------------------------------------------------------


def test_one_decision_attempt_wait_or_stop() -> None:
    policy = RetryPolicy(stop_after_attempt(3), wait_fixed(0.5), retry_if_exception_type())
    failed = PolicyState(attempt=1, error=OSError())
    assert policy.decide(failed) == PolicyDecision(Verdict.WAIT, 0.5)
    assert policy.decide(PolicyState(attempt=1, outcome="fine")) == PolicyDecision(Verdict.STOP)
    out = policy.decide(PolicyState(attempt=3, error=OSError()))
    assert out.verdict is Verdict.STOP and out.reason == "attempts"
    # A stop policy alone decides between going on and stopping.
    assert stop_after_attempt(2).decide(PolicyState(attempt=1)).verdict is Verdict.ATTEMPT
    assert stop_after_attempt(2).decide(PolicyState(attempt=2)).reason == "attempts"


# --- the drivers --------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 10.0

    def __call__(self) -> float:
        return self.now


def flaky(failures: int, clock: Clock, step_s: float = 1.0) -> Any:
    calls: list[int] = []

    def attempt(n: int) -> str:
        calls.append(n)
        clock.now += step_s
        if len(calls) <= failures:
            raise ConnectionError(f"attempt {n}")
        return f"answer {n}"

    attempt.calls = calls  # type: ignore[attr-defined]
    return attempt


def test_the_sync_driver_retries_after_each_wait_and_returns_the_answer() -> None:
    clock, slept, seen = Clock(), [], []
    policy = RetryPolicy(stop_after_attempt(5), wait_exponential(0.5, 2.0, 10.0))
    done = retry_sync(
        flaky(2, clock),
        policy,
        sleep=slept.append,
        clock=clock,
        before_sleep=lambda state, decision: seen.append((state.attempt, decision.delay_s)),
    )
    assert isinstance(done, Retried) and done.ok and done.unwrap() == "answer 3"
    assert done.attempts == 3 and slept == [0.5, 1.0] and done.delays == (0.5, 1.0)
    assert seen == [(1, 0.5), (2, 1.0)]
    assert done.slept_s == 1.5
    assert done.reason is None


def test_the_driver_gives_up_with_the_stop_reason_and_the_last_error() -> None:
    clock, slept = Clock(), []
    policy = RetryPolicy(stop_after_attempt(9) | stop_after_delay(2.5), wait_fixed(0.0))
    done = retry_sync(flaky(9, clock), policy, sleep=slept.append, clock=clock)
    assert not done.ok and isinstance(done.error, ConnectionError)
    assert done.attempts == 3 and done.reason == "deadline" and slept == [0.0, 0.0]
    with pytest.raises(ConnectionError, match="attempt 3"):
        done.unwrap()


def test_programming_errors_pass_straight_through() -> None:
    def broken(n: int) -> str:
        raise TypeError("a bug")

    retry_everything = RetryPolicy(stop_after_attempt(3), retry=retry_if_exception_type(exclude=()))
    with pytest.raises(TypeError):
        retry_sync(broken, retry_everything, sleep=lambda s: None)
    calls: list[int] = []

    def also_broken(n: int) -> str:
        calls.append(n)
        raise TypeError("retried on purpose")

    done = retry_sync(also_broken, retry_everything, sleep=lambda s: None, passthrough=())
    assert calls == [1, 2, 3] and isinstance(done.error, TypeError)


def test_observe_adds_the_facts_a_policy_reads() -> None:
    answers = iter(["", "", "full"])
    policy = RetryPolicy(
        stop_after_attempt(5),
        wait_fact("delay_s"),
        retry_if_result(lambda r: r == "") & (lambda s: s.fact("worth_it")),
    )
    slept: list[float] = []
    done = retry_sync(
        lambda n: next(answers),
        policy,
        sleep=slept.append,
        observe=lambda n, result, error: {"delay_s": n / 10, "worth_it": True},
    )
    assert done.unwrap() == "full" and slept == [0.1, 0.2]


def test_the_async_driver_makes_the_same_decisions() -> None:
    clock, slept, events = Clock(), [], []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    async def before(state: PolicyState, decision: PolicyDecision) -> None:
        events.append(state.attempt)

    sync_attempt = flaky(2, clock)

    async def attempt(n: int) -> str:
        return str(sync_attempt(n))

    policy = RetryPolicy(stop_after_attempt(5), wait_fixed(0.25))
    done = asyncio.run(retry_async(attempt, policy, sleep=sleep, clock=clock, before_sleep=before))
    assert done.unwrap() == "answer 3" and slept == [0.25, 0.25] and events == [1, 2]

    twin_clock, twin_slept = Clock(), []
    twin = retry_sync(flaky(2, twin_clock), policy, sleep=twin_slept.append, clock=twin_clock)
    assert (twin.attempts, twin.delays, twin_slept) == (done.attempts, done.delays, slept)


def test_the_driver_refuses_something_that_is_not_a_retry_policy() -> None:
    with pytest.raises(ConfigurationError) as info:
        retry_sync(lambda n: 1, stop_after_attempt(3))  # type: ignore[arg-type]
    assert info.value.argument == "policy"


def test_public_names_present_themselves_under_closedloop_policy() -> None:
    import closedloop.policy as policy

    assert policy.__all__ == sorted(
        policy.__all__, key=lambda n: (not n.isupper(), not n[:1].isupper(), n)
    )
    for name in policy.__all__:
        obj = getattr(policy, name)
        if isinstance(obj, type):
            assert obj.__module__ == "closedloop.policy", name
            assert obj.__doc__, name


def test_a_returned_attempt_is_judged_only_when_the_retry_slot_can_fire_on_it() -> None:
    assert not retry_if_exception_type().fires_on_results()
    assert not (retry_if_exception_type(OSError) | retry_never()).fires_on_results()
    assert (retry_if_exception_type() | retry_if_result(bool)).fires_on_results()
    assert not (retry_if_exception_type() & retry_if_result(bool)).fires_on_results()
    # Either way the answer is the same: a returned attempt under an exception-only
    # policy ends the loop, and a result condition still sees every result.
    seen: list[Any] = []
    policy = RetryPolicy(stop_after_attempt(3), retry=when(lambda s: seen.append(s.outcome)))
    assert retry_sync(lambda n: n * 10, policy, sleep=lambda s: None).unwrap() == 10
    assert seen == [10]
