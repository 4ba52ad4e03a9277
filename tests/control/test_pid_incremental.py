"""IncrementalPID: equal to the positional PID while unsaturated, and free of windup."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from closedloop import ConfigurationError
from closedloop.control import PID, FOPDTPlant, IncrementalPID, step_metrics

gains = st.floats(0.0, 10.0, allow_subnormal=False)
values = st.floats(-10.0, 10.0, allow_subnormal=False)
steps = st.floats(1e-2, 1.0)


@st.composite
def scripts(draw: st.DrawFn) -> list[tuple[Any, ...]]:
    update = st.tuples(st.just("update"), values, steps)
    setpoint = st.tuples(st.just("setpoint"), values)
    tunings = st.tuples(st.just("tunings"), st.tuples(gains, gains, gains))
    return draw(st.lists(st.one_of(update, update, update, setpoint, tunings), max_size=60))


def close(a: float, b: float, scale: float) -> bool:
    # The two forms round differently (a sum of differences against a sum of terms);
    # the error grows with the size of the terms involved, not with the output.
    return abs(a - b) <= 1e-9 * max(1.0, scale)


@given(
    kp=gains,
    ki=gains,
    kd=gains,
    setpoint=values,
    start=values,
    derivative_on=st.sampled_from(("error", "measurement")),
    script=scripts(),
)
def test_equals_positional_pid_without_limits(
    kp: float,
    ki: float,
    kd: float,
    setpoint: float,
    start: float,
    derivative_on: str,
    script: list[tuple[Any, ...]],
) -> None:
    inc = IncrementalPID(
        kp, ki, kd, setpoint=setpoint, derivative_on=derivative_on, starting_output=start
    )
    pos = PID(
        kp,
        ki,
        kd,
        setpoint=setpoint,
        derivative_on=derivative_on,
        anti_windup="none",
        starting_output=start,
    )
    scale = abs(start)
    for op in script:
        if op[0] == "update":
            _, y, dt = op
            u_pos = pos(y, dt=dt)
            scale = max(scale, *(abs(c) for c in pos.components))
            u_inc = inc(y, dt=dt)
            assert close(u_inc, u_pos, scale), (u_inc, u_pos)
        elif op[0] == "setpoint":
            inc.setpoint = pos.setpoint = op[1]
        else:
            inc.tunings = pos.tunings = op[1]


@given(
    kp=gains,
    ki=gains,
    kd=gains,
    setpoint=values,
    run=st.lists(st.tuples(values, steps), min_size=1, max_size=60),
)
def test_equals_positional_pid_until_the_first_saturation(
    kp: float, ki: float, kd: float, setpoint: float, run: list[tuple[float, float]]
) -> None:
    limits = (-3.0, 3.0)
    inc = IncrementalPID(kp, ki, kd, setpoint=setpoint, output_limits=limits, derivative_on="error")
    pos = PID(
        kp,
        ki,
        kd,
        setpoint=setpoint,
        output_limits=limits,
        derivative_on="error",
        anti_windup="none",
    )
    scale = 0.0
    for y, dt in run:
        u_pos = pos(y, dt=dt)
        u_inc = inc(y, dt=dt)
        scale = max(scale, *(abs(c) for c in pos.components))
        if sum(pos.components) != u_pos or u_inc in limits:
            break  # from here on the two forms are meant to differ
        assert close(u_inc, u_pos, scale), (u_inc, u_pos)


@given(
    kp=gains,
    ki=gains,
    kd=gains,
    lower=st.floats(-5.0, 0.0),
    width=st.floats(0.0, 5.0),
    run=st.lists(st.tuples(values, steps), min_size=1, max_size=60),
)
def test_output_always_inside_the_limits_and_delta_is_exposed(
    kp: float,
    ki: float,
    kd: float,
    lower: float,
    width: float,
    run: list[tuple[float, float]],
) -> None:
    upper = lower + width
    inc = IncrementalPID(kp, ki, kd, output_limits=(lower, upper))
    previous = inc.output
    for y, dt in run:
        u = inc(y, dt=dt)
        assert lower <= u <= upper
        assert u == inc.output
        unclipped = previous + inc.last_delta
        assert u == min(upper, max(lower, unclipped))
        previous = u


@given(
    first=st.lists(st.tuples(values, steps), max_size=30),
    second=st.lists(st.tuples(values, steps), min_size=1, max_size=30),
)
def test_reset_restores_first_call_behaviour(
    first: list[tuple[float, float]], second: list[tuple[float, float]]
) -> None:
    kwargs: dict[str, Any] = {"setpoint": 1.0, "output_limits": (-2.0, 2.0), "starting_output": 0.5}
    used = IncrementalPID(1.0, 2.0, 0.1, **kwargs)
    for y, dt in first:
        used(y, dt=dt)
    used.reset()
    fresh = IncrementalPID(1.0, 2.0, 0.1, **kwargs)
    assert used.output == fresh.output == 0.5
    for y, dt in second:
        assert used(y, dt=dt) == fresh(y, dt=dt)
        assert used.last_delta == fresh.last_delta


def test_leaves_saturation_on_the_first_step_back() -> None:
    # A long saturation followed by a measurement above the setpoint: the velocity form
    # moves off the limit at once; the positional form without anti-windup stays pinned.
    inc = IncrementalPID(1.0, 1.0, 0.0, setpoint=1.0, output_limits=(0.0, 1.0))
    free = PID(1.0, 1.0, 0.0, setpoint=1.0, output_limits=(0.0, 1.0), anti_windup="none")
    for _ in range(100):
        assert inc(0.0, dt=0.1) == free(0.0, dt=0.1) == 1.0
    assert inc(1.5, dt=0.1) < 1.0
    assert free(1.5, dt=0.1) == 1.0


def test_no_windup_overshoot_on_the_fopdt_plant() -> None:
    # The windup scenario of test_pid_windup.py with the velocity form.
    h = 0.01
    pid = IncrementalPID(2.5, 2.5, 0.0, setpoint=1.0, output_limits=(0.0, 1.2))
    plant = FOPDTPlant(1.0, 1.0, 0.2, h=h)
    t, ys, y = [], [], 0.0
    for k in range(1001):
        u = pid(y, dt=h)
        t.append(k * h)
        ys.append(y)
        y = plant.step(u)
    metrics = step_metrics(t, ys, 1.0)
    assert metrics.overshoot_pct <= 0.5  # measured: 0.0 %
    assert metrics.steady_state_error < 1e-3


def test_default_dt_and_per_call_dt() -> None:
    a = IncrementalPID(1.0, 1.0, 0.0, setpoint=1.0, dt=0.1)
    b = IncrementalPID(1.0, 1.0, 0.0, setpoint=1.0)
    assert a(0.0) == b(0.0, dt=0.1) == pytest.approx(1.1)
    assert a(0.0, dt=0.5) == b(0.0, dt=0.5) == pytest.approx(1.6)
    with pytest.raises(ConfigurationError, match="dt"):
        b(0.0)


def test_setters_and_repr() -> None:
    inc = IncrementalPID(1.0, 0.0, 0.0, output_limits=(None, None), starting_output=5.0)
    inc.output_limits = (0.0, 2.0)
    assert inc.output_limits == (0.0, 2.0)
    assert inc.output == 2.0
    inc.setpoint = 3.0
    assert inc.setpoint == 3.0
    inc.tunings = (0.5, 0.25, 0.0)
    assert inc.tunings == (0.5, 0.25, 0.0)
    assert "IncrementalPID(kp=0.5" in repr(inc)
    with pytest.raises(ConfigurationError, match="ki"):
        inc.tunings = (1.0, -1.0, 0.0)
    assert inc.tunings == (0.5, 0.25, 0.0)


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"kp": -1.0}, "kp"),
        ({"kd": math.inf}, "kd"),
        ({"output_limits": (1.0, 0.0)}, "output_limits"),
        ({"dt": 0.0}, "dt"),
        ({"derivative_on": "both"}, "derivative_on"),
        ({"setpoint": math.nan}, "setpoint"),
        ({"starting_output": math.inf}, "starting_output"),
    ],
)
def test_bad_configuration(kwargs: dict[str, Any], argument: str) -> None:
    kw: dict[str, Any] = {"kp": 1.0, "ki": 1.0, "kd": 0.0, **kwargs}
    with pytest.raises(ConfigurationError) as info:
        IncrementalPID(kw.pop("kp"), kw.pop("ki"), kw.pop("kd"), **kw)
    assert info.value.argument == argument
    assert argument in str(info.value)


@pytest.mark.parametrize(("measurement", "dt"), [(math.nan, 0.1), (1.0, -1.0), (1.0, math.nan)])
def test_bad_update_changes_nothing(measurement: float, dt: float) -> None:
    inc = IncrementalPID(1.0, 1.0, 1.0, setpoint=1.0)
    inc(0.0, dt=0.1)
    before = (inc.output, inc.last_delta)
    with pytest.raises(ConfigurationError):
        inc(measurement, dt=dt)
    assert (inc.output, inc.last_delta) == before
