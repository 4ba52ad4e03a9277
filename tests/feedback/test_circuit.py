"""CircuitBreaker state machine on a fake clock."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from closedloop import CircuitOpenError, ConfigurationError
from closedloop.feedback import CircuitBreaker, CircuitState

from .conftest import FakeClock


class Boom(Exception):
    pass


async def ok() -> str:
    return "ok"


async def fail() -> str:
    raise Boom


def make(clock: FakeClock, **kw: object) -> tuple[CircuitBreaker, list[tuple[str, str]]]:
    changes: list[tuple[str, str]] = []
    breaker = CircuitBreaker(
        "api",
        clock=clock,
        on_transition=lambda b, old, new: changes.append((old.value, new.value)),
        **{"failure_threshold": 3, "recovery_timeout_s": 10.0, **kw},  # type: ignore[arg-type]
    )
    return breaker, changes


async def test_full_cycle_closed_open_half_open_closed(clock: FakeClock) -> None:
    breaker, changes = make(clock)
    assert breaker.state is CircuitState.CLOSED

    for _ in range(2):
        with pytest.raises(Boom):
            await breaker.call(fail)
    assert breaker.failures == 2 and breaker.state is CircuitState.CLOSED
    assert await breaker.call(ok) == "ok"  # a success resets the consecutive count
    assert breaker.failures == 0

    for _ in range(3):
        with pytest.raises(Boom):
            await breaker.call(fail)
    assert breaker.state is CircuitState.OPEN
    assert breaker.retry_at == clock.now + 10

    ran = False

    async def must_not_run() -> None:
        nonlocal ran
        ran = True

    clock.advance(9.9)
    with pytest.raises(CircuitOpenError, match=r"'api' is open; next probe allowed in 0\.1"):
        await breaker.call(must_not_run)
    assert not ran

    clock.advance(0.1)
    assert breaker.state is CircuitState.HALF_OPEN
    assert await breaker.call(ok) == "ok"
    assert breaker.state is CircuitState.CLOSED
    assert changes == [("closed", "open"), ("open", "half_open"), ("half_open", "closed")]
    assert breaker.times_opened == 1


async def test_a_failed_probe_reopens_for_a_new_recovery_period(clock: FakeClock) -> None:
    breaker, changes = make(clock, failure_threshold=1)
    with pytest.raises(Boom):
        await breaker.call(fail)
    clock.advance(10)
    with pytest.raises(Boom):
        await breaker.call(fail)
    assert breaker.state is CircuitState.OPEN
    assert breaker.retry_at == clock.now + 10
    assert changes == [("closed", "open"), ("open", "half_open"), ("half_open", "open")]
    assert breaker.times_opened == 2


async def test_half_open_admits_a_limited_number_of_probes(clock: FakeClock) -> None:
    breaker, _ = make(clock, failure_threshold=1, half_open_probes=2)
    breaker.trip()
    clock.advance(10)
    release = asyncio.Event()
    entered = 0

    async def probe() -> None:
        nonlocal entered
        async with breaker:
            entered += 1
            await release.wait()

    probes = [asyncio.create_task(probe()) for _ in range(2)]
    while entered < 2:
        await asyncio.sleep(0)
    with pytest.raises(CircuitOpenError, match="half-open"):
        async with breaker:
            pass
    assert breaker.state is CircuitState.HALF_OPEN
    release.set()
    await asyncio.gather(*probes)
    # Both probes succeeded: closed again, and calls flow.
    assert breaker.state is CircuitState.CLOSED
    async with breaker:
        pass


async def test_probes_need_all_successes_to_close(clock: FakeClock) -> None:
    breaker, _ = make(clock, failure_threshold=1, half_open_probes=2)
    breaker.trip()
    clock.advance(10)
    await breaker.call(ok)
    assert breaker.state is CircuitState.HALF_OPEN
    await breaker.call(ok)
    assert breaker.state is CircuitState.CLOSED


async def test_non_failures_and_cancellation_release_the_probe_slot(clock: FakeClock) -> None:
    breaker, _ = make(clock, failure_threshold=1, failure_types=(Boom,))
    breaker.trip()
    clock.advance(10)

    async def bad_argument() -> None:
        raise KeyError("caller bug, not the source's fault")

    with pytest.raises(KeyError):
        await breaker.call(bad_argument)
    assert breaker.state is CircuitState.HALF_OPEN

    started = asyncio.Event()

    async def hang() -> None:
        async with breaker:
            started.set()
            await asyncio.Event().wait()

    task = asyncio.create_task(hang())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert breaker.state is CircuitState.HALF_OPEN
    await breaker.call(ok)  # the slot was given back, so this probe is admitted
    assert breaker.state is CircuitState.CLOSED


async def test_errors_outside_failure_types_do_not_open(clock: FakeClock) -> None:
    breaker, _ = make(clock, failure_threshold=1, failure_types=(Boom,))
    for _ in range(5):
        with pytest.raises(ValueError):
            async with breaker:
                raise ValueError("not counted")
    assert breaker.state is CircuitState.CLOSED
    with pytest.raises(Boom):
        async with breaker:
            raise Boom
    assert breaker.state is CircuitState.OPEN


async def test_outcomes_of_calls_from_before_a_transition_are_ignored(clock: FakeClock) -> None:
    breaker, _ = make(clock, failure_threshold=1)
    gate = asyncio.Event()

    async def slow_success() -> str:
        await gate.wait()
        return "late"

    task = asyncio.create_task(breaker.call(slow_success))
    await asyncio.sleep(0)
    breaker.trip()
    gate.set()
    assert await task == "late"
    # The late success was admitted while closed; it says nothing about the open period.
    assert breaker.state is CircuitState.OPEN


def test_record_failure_and_success_from_outside(clock: FakeClock) -> None:
    breaker, _ = make(clock, failure_threshold=2)
    breaker.record_failure()
    breaker.record_failure()
    assert breaker.state is CircuitState.OPEN
    breaker.record_failure()  # while open: nothing changes, the deadline does not move
    assert breaker.retry_at == clock.now + 10
    clock.advance(10)
    breaker.record_success()
    assert breaker.state is CircuitState.CLOSED
    breaker.trip()
    breaker.reset()
    assert breaker.state is CircuitState.CLOSED and breaker.failures == 0
    assert breaker.snapshot() == {
        "name": "api",
        "state": "closed",
        "failures": 0,
        "retry_at": None,
        "times_opened": 2,
    }


def test_a_raising_observer_does_not_break_the_breaker(clock: FakeClock) -> None:
    def bad_observer(*_: object) -> None:
        raise RuntimeError("observer bug")

    breaker = CircuitBreaker(failure_threshold=1, clock=clock, on_transition=bad_observer)
    breaker.record_failure()
    assert breaker.state is CircuitState.OPEN


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"failure_threshold": 0}, "failure_threshold"),
        ({"recovery_timeout_s": 0}, "recovery_timeout_s"),
        ({"recovery_timeout_s": float("inf")}, "recovery_timeout_s"),
        ({"half_open_probes": 0}, "half_open_probes"),
        ({"failure_types": (int,)}, "failure_types"),
    ],
)
def test_settings_are_validated(kwargs: dict[str, object], argument: str) -> None:
    with pytest.raises(ConfigurationError, match=argument):
        CircuitBreaker(**kwargs)  # type: ignore[arg-type]


@given(
    threshold=st.integers(1, 4),
    probes=st.integers(1, 3),
    steps=st.lists(st.sampled_from(["ok", "fail", "wait", "half", "full"]), max_size=60),
)
def test_against_a_reference_model(threshold: int, probes: int, steps: list[str]) -> None:
    """Random outcomes and waits: the breaker matches a tiny reference model at every step."""
    clock = FakeClock()
    breaker = CircuitBreaker(
        failure_threshold=threshold, recovery_timeout_s=5, half_open_probes=probes, clock=clock
    )
    state, failures, opened_at, successes = "closed", 0, 0.0, 0
    for step in steps:
        if step == "wait":
            clock.advance(2.5)
        elif step == "half":
            clock.advance(5)
        elif step == "full":
            clock.advance(100)
        if state == "open" and clock.now >= opened_at + 5:
            state, successes = "half_open", 0
        if step in ("ok", "fail"):
            if state == "open":
                with pytest.raises(CircuitOpenError):
                    asyncio.run(breaker.call(ok))
            else:
                outcome = ok if step == "ok" else fail
                with contextlib.suppress(Boom):
                    asyncio.run(breaker.call(outcome))
                if state == "closed":
                    failures = 0 if step == "ok" else failures + 1
                    if failures >= threshold:
                        state, opened_at, failures = "open", clock.now, 0
                elif step == "fail":
                    state, opened_at = "open", clock.now
                else:
                    successes += 1
                    if successes >= probes:
                        state, failures = "closed", 0
        assert breaker.state.value == state
        assert breaker.failures == failures
