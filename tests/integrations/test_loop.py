"""ControlLoop: one PID per key on e − tolerance, scheduled settings, a bounded history."""

from __future__ import annotations

import itertools
import json
import math
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from closedloop import ConfigurationError
from closedloop.control import ActuatorSchedule, Strictness, schedule_max_retries
from closedloop.integrations import DEFAULT_GAINS, ControlContext, ControlLoop

errors = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
gains = st.tuples(st.floats(0.0, 2.0), st.floats(0.0, 0.5), st.floats(0.0, 1.0)).filter(
    lambda g: any(g)
)


def reference_u(
    es: list[float], kp: float, ki: float, kd: float, tol: float, dt: float
) -> list[float]:
    """A textbook positional PID on e − tol, integral clamped to [0, 1], output clipped."""
    out: list[float] = []
    integral = 0.0
    previous: float | None = None
    for e in es:
        p = kp * (e - tol)
        integral = min(1.0, max(0.0, integral + ki * (e - tol) * dt))
        d = 0.0 if previous is None else kd * (e - previous) / dt
        previous = e
        out.append(min(1.0, max(0.0, p + integral + d)))
    return out


@given(st.lists(errors, min_size=1, max_size=30), gains, st.floats(0.0, 0.5), st.floats(0.1, 5.0))
def test_the_loop_is_a_pid_on_the_error_minus_the_tolerance(
    es: list[float], g: tuple[float, float, float], tol: float, dt: float
) -> None:
    loop = ControlLoop(gains=g, tolerance=tol, dt=dt)
    schedule = ActuatorSchedule()
    expected = reference_u(es, *g, tol, dt)
    for e, want in zip(es, expected, strict=True):
        record = loop.update("k", e)
        assert math.isclose(record.u, want, rel_tol=1e-9, abs_tol=1e-12)
        assert 0.0 <= record.u <= 1.0
        assert record.settings == schedule(record.u)
        assert loop.settings("k") == record.settings


def test_the_first_failure_raises_the_rigour_by_the_seed_gains() -> None:
    loop = ControlLoop()
    assert loop.gains == DEFAULT_GAINS
    record = loop.update("weather", 1.0)
    kp, ki, _ = DEFAULT_GAINS
    assert record.u == pytest.approx(kp * 0.9 + ki * 0.9)
    assert record.applied.u == 0.0
    assert record.settings.strictness is Strictness.STRICT
    assert record.settings.max_retries == 1
    assert record.failed


def test_good_calls_wind_the_integral_back_down() -> None:
    loop = ControlLoop()
    for _ in range(5):
        loop.update("k", 1.0)
    integral_after_failures = loop.pid("k").components[1]
    assert integral_after_failures > 0.2
    integrals = [loop.update("k", 0.0).components[1] for _ in range(200)]
    assert all(b <= a for a, b in itertools.pairwise(integrals))
    assert integrals[-1] == 0.0
    assert loop.settings("k").u == 0.0


def test_with_zero_tolerance_the_integral_never_recovers() -> None:
    # Why the tolerance exists: errors are never negative, so with a setpoint of 0 the
    # integral term can only grow.
    loop = ControlLoop(tolerance=0.0)
    for _ in range(3):
        loop.update("k", 1.0)
    stuck = loop.pid("k").components[1]
    for _ in range(50):
        loop.update("k", 0.0)
    assert loop.pid("k").components[1] == stuck > 0.0
    assert loop.settings("k").u == pytest.approx(stuck)


def test_keys_are_independent_and_the_least_recently_used_is_forgotten() -> None:
    loop = ControlLoop(max_keys=2)
    loop.update("a", 1.0)
    loop.update("b", 0.0)
    assert loop.settings("a").u > 0.0
    assert loop.settings("b").u == 0.0
    loop.update("a", 1.0)  # a is now the most recent
    loop.update("c", 0.0)  # evicts b
    assert loop.keys == ("a", "c")
    assert loop.settings("new").u == 0.0  # unknown keys get the initial settings


def test_history_is_bounded_and_grouped_by_call() -> None:
    loop = ControlLoop(history=3)
    call = loop.begin_call()
    loop.update("k", 1.0, call=call, attempt=1)
    loop.update("k", 0.0, call=call, attempt=2)
    loop.update("j", 0.5)
    loop.update("k", 0.2)
    assert [r.seq for r in loop.history] == [2, 3, 4]
    assert [r.key for r in loop.records("k")] == ["k", "k"]
    assert loop.history[0].call == call
    assert loop.history[-1].call != call
    json.dumps([r.as_dict() for r in loop.history])


def test_context_carries_the_settings_and_the_last_error() -> None:
    loop = ControlLoop()
    first = loop.context("k")
    assert first.last_error is None and first.attempt == 1 and first.rigour == 0.0
    loop.update("k", 0.75)
    ctx = loop.context("k", attempt=2)
    assert ctx.last_error == 0.75
    assert ctx.attempt == 2
    assert ctx.rigour == loop.settings("k").u
    assert ctx.timeout_s == ctx.settings.timeout_ms / 1000
    assert ctx.retry_delay_s == ctx.settings.retry_delay_ms / 1000
    assert ctx.strict == (ctx.strictness is Strictness.STRICT)
    headers = dict(ctx.headers("x-cl-"))
    assert headers["x-cl-rigour"] == f"{ctx.rigour:.3f}"
    assert headers["x-cl-max-retries"] == str(ctx.max_retries)
    assert "rigour" in ctx.prompt() and "严谨度" in ctx.prompt("zh")
    assert json.loads(json.dumps(ctx.as_dict()))["settings"]["u"] == ctx.rigour


def test_a_custom_schedule_and_starting_point() -> None:
    schedule = ActuatorSchedule(max_retries=schedule_max_retries(0.2, below=1, above=3))
    loop = ControlLoop(schedule=schedule, starting_u=0.3)
    assert loop.settings("k").max_retries == 3
    assert loop.settings("k").u == 0.3


def test_concurrent_updates_lose_nothing() -> None:
    loop = ControlLoop(history=10_000)

    def work(i: int) -> None:
        for j in range(200):
            loop.update(f"k{i % 3}", (i + j) % 2)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seqs = [r.seq for r in loop.history]
    assert sorted(seqs) == list(range(1, 1601))


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"gains": (1.0, 2.0)}, "gains"),
        ({"gains": 5}, "gains"),
        ({"gains": (-0.1, 0.0, 0.0)}, "gains.kp"),
        ({"gains": (0.5, math.nan, 0.0)}, "gains.ki"),
        ({"gains": (0.5, 0.0, math.inf)}, "gains.kd"),
        ({"gains": (True, 0.0, 0.0)}, "gains.kp"),
        ({"gains": (0.0, 0.0, 0.0)}, "gains"),
        ({"tolerance": 1.0}, "tolerance"),
        ({"tolerance": -0.1}, "tolerance"),
        ({"dt": 0.0}, "dt"),
        ({"schedule": 42}, "schedule"),
        ({"schedule": lambda u: u}, "schedule"),
        ({"starting_u": 1.5}, "starting_u"),
        ({"history": 0}, "history"),
        ({"max_keys": 0}, "max_keys"),
    ],
)
def test_bad_configuration_names_the_argument(kwargs: dict[str, object], argument: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        ControlLoop(**kwargs)  # type: ignore[arg-type]
    assert info.value.argument == argument
    assert argument.split(".")[0] in str(info.value)


@pytest.mark.parametrize("error", [math.nan, -0.01, 1.01, math.inf, "0.5"])
def test_update_refuses_errors_outside_the_unit_interval(error: object) -> None:
    with pytest.raises(ConfigurationError) as info:
        ControlLoop().update("k", error)  # type: ignore[arg-type]
    assert info.value.argument == "error"


def test_keys_must_be_strings() -> None:
    with pytest.raises(ConfigurationError) as info:
        ControlLoop().update(("a", 1), 0.5)  # type: ignore[arg-type]
    assert info.value.argument == "key"


def test_reset_forgets_one_key_or_everything() -> None:
    loop = ControlLoop()
    loop.update("a", 1.0)
    loop.update("b", 1.0)
    loop.reset("a")
    assert loop.settings("a").u == 0.0 and loop.settings("b").u > 0.0
    loop.reset()
    assert loop.keys == () and loop.history == ()
    assert isinstance(loop.context("b"), ControlContext)
