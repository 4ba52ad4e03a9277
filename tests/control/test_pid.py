"""PID: the terms, the modes, the clock, bad input, and properties that hold for any input."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from closedloop import ConfigurationError
from closedloop.control import PID

MODES = ("none", "clamp", "conditional", "back_calculation")

gains = st.floats(0.0, 10.0, allow_subnormal=False)
values = st.floats(-10.0, 10.0, allow_subnormal=False)
steps = st.floats(1e-3, 1.0)
measurement_runs = st.lists(st.tuples(values, steps), min_size=1, max_size=50)


@st.composite
def limit_pairs(draw: st.DrawFn) -> tuple[float | None, float | None]:
    lower = draw(st.none() | st.floats(-5.0, 5.0))
    upper = draw(st.none() | st.floats(-5.0, 5.0))
    if lower is not None and upper is not None and lower > upper:
        lower, upper = upper, lower
    return lower, upper


@st.composite
def pids(draw: st.DrawFn) -> dict[str, Any]:
    """Keyword arguments for any valid PID (without a clock)."""
    return {
        "kp": draw(gains),
        "ki": draw(gains),
        "kd": draw(gains),
        "setpoint": draw(values),
        "output_limits": draw(limit_pairs()),
        "anti_windup": draw(st.sampled_from(MODES)),
        "kb": draw(st.floats(0.0, 20.0)),
        "derivative_on": draw(st.sampled_from(("measurement", "error"))),
        "proportional_on": draw(st.sampled_from(("error", "measurement"))),
        "sample_time": draw(st.none() | st.floats(0.0, 0.3)),
        "starting_output": draw(values),
    }


def build(kw: dict[str, Any], **overrides: Any) -> PID:
    kw = {**kw, **overrides}
    return PID(kw.pop("kp"), kw.pop("ki"), kw.pop("kd"), **kw)


# --- the terms, computed by hand from their definitions ---


def test_terms_by_hand() -> None:
    pid = PID(2.0, 0.5, 0.1, setpoint=1.0)
    # First call: e=1, P=2·1, I=0.5·1·0.1, D=0 (no previous measurement).
    assert pid(0.0, dt=0.1) == pytest.approx(2.05)
    assert pid.components == pytest.approx((2.0, 0.05, 0.0))
    # Second call: e=0.5, P=1, I=0.05+0.5·0.5·0.1, D=−0.1·(0.5−0)/0.1.
    assert pid(0.5, dt=0.1) == pytest.approx(1.0 + 0.075 - 0.5)
    assert pid.components == pytest.approx((1.0, 0.075, -0.5))


def test_derivative_on_error_kicks_on_setpoint_change_measurement_does_not() -> None:
    on_error = PID(0.0, 0.0, 1.0, derivative_on="error")
    on_meas = PID(0.0, 0.0, 1.0, derivative_on="measurement")
    for pid in (on_error, on_meas):
        pid(0.0, dt=0.5)
        pid.setpoint = 2.0
    assert on_error(0.0, dt=0.5) == pytest.approx(4.0)  # kd·Δe/dt = 2/0.5
    assert on_meas(0.0, dt=0.5) == 0.0


def test_proportional_on_measurement_accumulates_and_ignores_setpoint_steps() -> None:
    pid = PID(2.0, 0.0, 0.0, setpoint=5.0, proportional_on="measurement")
    assert pid(1.0, dt=0.1) == 0.0  # nothing has moved yet
    pid.setpoint = -5.0
    assert pid(1.5, dt=0.1) == pytest.approx(-1.0)  # −kp·Δy, the setpoint step is invisible
    assert pid(1.0, dt=0.1) == pytest.approx(0.0)


def test_output_is_clipped_but_components_are_not() -> None:
    pid = PID(10.0, 0.0, 0.0, setpoint=1.0, output_limits=(-1.0, 1.0))
    assert pid(0.0, dt=0.1) == 1.0
    assert pid.components[0] == 10.0
    assert pid(3.0, dt=0.1) == -1.0


def test_conditional_integrates_again_once_the_error_turns() -> None:
    pid = PID(0.0, 1.0, 0.0, setpoint=1.0, output_limits=(0.0, 0.5), anti_windup="conditional")
    for _ in range(20):
        pid(0.0, dt=0.1)
    frozen = pid.components[1]
    assert frozen == pytest.approx(0.5)  # reached the limit, then stopped
    pid(2.0, dt=0.1)  # error −1 pulls away from the upper limit: integrate at once
    assert pid.components[1] == pytest.approx(frozen - 0.1)


def test_back_calculation_pulls_the_integral_toward_the_limit() -> None:
    strong = PID(
        0.0,
        1.0,
        0.0,
        setpoint=1.0,
        output_limits=(0.0, 0.5),
        anti_windup="back_calculation",
        kb=5.0,
    )
    free = PID(0.0, 1.0, 0.0, setpoint=1.0, output_limits=(0.0, 0.5), anti_windup="none")
    for _ in range(100):
        strong(0.0, dt=0.1)
        free(0.0, dt=0.1)
    assert free.components[1] == pytest.approx(10.0)
    # The unclipped output v settles where ki·e = kb·(v − 0.5), v = 0.7; the stored
    # integral is v after this update's correction: 0.7 − kb·(0.7 − 0.5)·dt = 0.6.
    assert strong.components[1] == pytest.approx(0.6)


@given(kw=pids(), run=measurement_runs)
def test_back_calculation_with_zero_gain_is_no_anti_windup(
    kw: dict[str, Any], run: list[tuple[float, float]]
) -> None:
    back = build(kw, anti_windup="back_calculation", kb=0.0)
    none = build(kw, anti_windup="none")
    for y, dt in run:
        assert back(y, dt=dt) == none(y, dt=dt)
        assert back.components == none.components


# --- properties ---


@given(kw=pids(), run=measurement_runs)
def test_output_always_inside_the_limits(
    kw: dict[str, Any], run: list[tuple[float, float]]
) -> None:
    pid = build(kw)
    lower, upper = pid.output_limits
    for y, dt in run:
        u = pid(y, dt=dt)
        assert math.isfinite(u)
        assert lower is None or u >= lower
        assert upper is None or u <= upper


@given(kw=pids(), first=measurement_runs, second=measurement_runs)
def test_reset_restores_first_call_behaviour(
    kw: dict[str, Any], first: list[tuple[float, float]], second: list[tuple[float, float]]
) -> None:
    used = build(kw)
    for y, dt in first:
        used(y, dt=dt)
    used.reset()
    fresh = build(kw)
    for y, dt in second:
        assert used(y, dt=dt) == fresh(y, dt=dt)
        assert used.components == fresh.components


@given(kw=pids(), run=measurement_runs)
def test_clock_timed_equals_explicit_dt(
    fake_clock_type: Any, kw: dict[str, Any], run: list[tuple[float, float]]
) -> None:
    # sample_time is off: with it a skipped clock-timed call lets time accumulate
    # (as in simple-pid), while explicit dt values are judged one by one.
    kw = {**kw, "sample_time": None}
    clock = fake_clock_type(start=0.0)
    timed = build(kw, time_fn=clock)
    explicit = build(kw)
    for y, dt in run:
        before = clock.now
        clock.advance(dt)
        # The timed controller sees the same dt up to the rounding of (t + dt) − t.
        expected = explicit(y, dt=clock.now - before)
        assert timed(y) == expected


@given(
    kw=pids(),
    bad=st.sampled_from([(-1.0, 0.0, 0.0), (0.0, -0.1, 0.0), (0.0, 0.0, -2.0), (math.nan, 0, 0)]),
)
def test_tunings_setter_validates_and_keeps_the_old_gains(
    kw: dict[str, Any], bad: tuple[float, float, float]
) -> None:
    pid = build(kw)
    before = pid.tunings
    with pytest.raises(ConfigurationError) as info:
        pid.tunings = bad
    assert info.value.argument in {"kp", "ki", "kd"}
    assert pid.tunings == before


def test_tunings_round_trip_and_shape() -> None:
    pid = PID(1.0, 2.0, 3.0)
    assert pid.tunings == (1.0, 2.0, 3.0)
    pid.tunings = (0.5, 0.0, 4.0)
    assert pid.tunings == (0.5, 0.0, 4.0)
    with pytest.raises(ConfigurationError, match="tunings"):
        pid.tunings = (1.0, 2.0)  # type: ignore[assignment]


# --- auto / manual ---


def test_manual_mode_holds_the_output_and_ignores_measurements() -> None:
    pid = PID(1.0, 1.0, 0.0, setpoint=1.0)
    held = pid(0.0, dt=0.1)
    pid.auto_mode = False
    assert not pid.auto_mode
    assert pid(50.0, dt=0.1) == held
    assert pid.components[1] == pytest.approx(0.1)  # no integration in manual mode


def test_manual_before_any_update_returns_the_starting_output() -> None:
    pid = PID(1.0, 1.0, 0.0, output_limits=(0.0, 2.0), starting_output=5.0)
    pid.auto_mode = False
    assert pid(1.0, dt=0.1) == 2.0


def test_switch_to_auto_with_last_output_is_bumpless() -> None:
    pid = PID(3.0, 1.0, 1.0, setpoint=2.0, proportional_on="measurement")
    pid(0.0, dt=0.1)
    pid.set_auto_mode(False)
    pid.set_auto_mode(True, last_output=0.7)
    # P restarts at 0, D has no history, the integral starts at 0.7: no jump in u
    # beyond one step of integration.
    assert pid(1.0, dt=0.1) == pytest.approx(0.7 + 1.0 * 1.0 * 0.1)


def test_switch_to_auto_without_last_output_continues_from_own_output() -> None:
    pid = PID(0.0, 1.0, 0.0, setpoint=1.0, output_limits=(0.0, 10.0))
    for _ in range(5):
        last = pid(0.0, dt=1.0)
    pid.auto_mode = False
    pid.auto_mode = True
    assert pid.components[1] == last
    assert pid(1.0, dt=1.0) == last  # zero error: the output does not move


def test_set_auto_mode_rejects_a_non_finite_last_output() -> None:
    pid = PID(1.0, 0.0, 0.0)
    pid.auto_mode = False
    with pytest.raises(ConfigurationError, match="last_output"):
        pid.set_auto_mode(True, last_output=math.inf)


# --- time: sample_time and the injected clock ---


def test_sample_time_returns_the_last_output_when_called_too_soon() -> None:
    pid = PID(1.0, 1.0, 0.0, setpoint=1.0, sample_time=0.5)
    first = pid(0.0, dt=0.1)  # the first call always computes
    assert pid(0.9, dt=0.1) == first
    assert pid(0.9, dt=0.5) != first


def test_sample_time_with_a_clock_accumulates_skipped_time(fake_clock: Any) -> None:
    pid = PID(0.0, 1.0, 0.0, setpoint=1.0, sample_time=0.5, time_fn=fake_clock)
    fake_clock.advance(1.0)
    assert pid(0.0) == pytest.approx(1.0)
    fake_clock.advance(0.3)
    assert pid(0.0) == pytest.approx(1.0)  # too soon
    fake_clock.advance(0.3)
    assert pid(0.0) == pytest.approx(1.6)  # 0.6 s since the last update


def test_explicit_dt_never_reads_the_clock(fake_clock: Any) -> None:
    pid = PID(1.0, 1.0, 1.0, time_fn=fake_clock)
    reads = fake_clock.reads  # once, at construction
    for _ in range(10):
        pid(0.3, dt=0.1)
    assert fake_clock.reads == reads


def test_a_stalled_clock_holds_the_output(fake_clock: Any) -> None:
    pid = PID(1.0, 1.0, 1.0, setpoint=1.0, time_fn=fake_clock)
    fake_clock.advance(0.1)
    u = pid(0.0)
    assert pid(0.5) == u  # no time has passed: no derivative by 1e-16
    fake_clock.advance(0.1)
    assert pid(0.5) != u


def test_first_call_at_the_reset_instant_has_no_integral_or_derivative(fake_clock: Any) -> None:
    pid = PID(2.0, 100.0, 100.0, setpoint=1.0, time_fn=fake_clock)
    assert pid(0.0) == pytest.approx(2.0)
    assert pid.components[2] == 0.0


def test_a_clock_timed_call_after_explicit_dt_calls_restarts_timing(fake_clock: Any) -> None:
    pid = PID(0.0, 1.0, 0.0, setpoint=1.0, time_fn=fake_clock)
    u = pid(0.0, dt=1.0)
    fake_clock.advance(100.0)  # how long since the last update is unknown to the clock
    assert pid(0.0) == u
    fake_clock.advance(0.5)
    assert pid(0.0) == pytest.approx(u + 0.5)


# --- limits and setpoint ---


def test_output_limits_setter_clips_held_output_and_clamped_integral() -> None:
    pid = PID(0.0, 1.0, 0.0, setpoint=1.0)
    for _ in range(10):
        pid(0.0, dt=1.0)
    pid.output_limits = (None, 3.0)
    assert pid.output_limits == (None, 3.0)
    assert pid.components[1] == 3.0
    pid.auto_mode = False
    assert pid(0.0, dt=1.0) == 3.0


def test_output_limits_setter_leaves_a_free_integral_alone() -> None:
    pid = PID(0.0, 1.0, 0.0, setpoint=1.0, anti_windup="none")
    for _ in range(10):
        pid(0.0, dt=1.0)
    pid.output_limits = (0.0, 3.0)
    assert pid.components[1] == 10.0


def test_setpoint_is_settable_and_validated() -> None:
    pid = PID(1.0, 0.0, 0.0)
    pid.setpoint = 4.0
    assert pid.setpoint == 4.0
    assert pid(1.0, dt=0.1) == 3.0
    with pytest.raises(ConfigurationError, match="setpoint"):
        pid.setpoint = math.nan


def test_repr_and_anti_windup_property() -> None:
    pid = PID(1.5, 0.25, 0.0, anti_windup="conditional", output_limits=(0.0, None))
    assert pid.anti_windup == "conditional"
    assert "kp=1.5" in repr(pid) and "conditional" in repr(pid) and "(0.0, None)" in repr(pid)


# --- bad input ---


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"kp": -1.0}, "kp"),
        ({"ki": -0.5}, "ki"),
        ({"kd": -1e-9}, "kd"),
        ({"kp": math.nan}, "kp"),
        ({"output_limits": (2.0, 1.0)}, "output_limits"),
        ({"output_limits": (0.0, math.inf)}, "output_limits[1]"),
        ({"output_limits": 5.0}, "output_limits"),
        ({"anti_windup": "integrator_clamping"}, "anti_windup"),
        ({"derivative_on": "setpoint"}, "derivative_on"),
        ({"proportional_on": "input"}, "proportional_on"),
        ({"kb": -1.0}, "kb"),
        ({"setpoint": math.inf}, "setpoint"),
        ({"sample_time": -0.1}, "sample_time"),
        ({"starting_output": math.nan}, "starting_output"),
        ({"time_fn": 3.0}, "time_fn"),
    ],
)
def test_bad_configuration_names_the_argument_and_value(
    kwargs: dict[str, Any], argument: str
) -> None:
    kw: dict[str, Any] = {"kp": 1.0, "ki": 1.0, "kd": 0.0, **kwargs}
    with pytest.raises(ConfigurationError) as info:
        build(kw)
    assert info.value.argument == argument
    assert isinstance(info.value, ValueError)
    assert argument in str(info.value)
    assert repr(info.value.value) in str(info.value)


@pytest.mark.parametrize("measurement", [math.nan, math.inf, -math.inf, "1.0", None])
def test_bad_measurement_is_rejected(measurement: Any) -> None:
    pid = PID(1.0, 1.0, 0.0)
    with pytest.raises(ConfigurationError) as info:
        pid(measurement, dt=0.1)
    assert info.value.argument == "measurement"
    assert repr(measurement) in str(info.value)


@pytest.mark.parametrize("auto", [True, False])
@pytest.mark.parametrize("dt", [0.0, -0.01, math.nan, math.inf])
def test_bad_dt_is_rejected_and_changes_nothing(dt: float, auto: bool) -> None:
    pid = PID(1.0, 1.0, 1.0, setpoint=1.0)
    pid(0.0, dt=0.1)
    pid.auto_mode = auto
    before = pid.components
    with pytest.raises(ConfigurationError) as info:
        pid(0.5, dt=dt)
    assert info.value.argument == "dt"
    assert repr(dt) in str(info.value)
    assert pid.components == before
