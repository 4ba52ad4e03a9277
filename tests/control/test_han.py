"""Han's fal, fhan and tracking differentiator."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from closedloop import ConfigurationError
from closedloop.control import TrackingDifferentiator, fal, fhan

finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)


# --- fal ---------------------------------------------------------------------------------


def test_fal_values() -> None:
    assert fal(4.0, 0.5, 0.1) == pytest.approx(2.0)
    assert fal(-4.0, 0.5, 0.1) == pytest.approx(-2.0)
    # Inside the band the line has slope delta^(alpha − 1).
    assert fal(0.05, 0.5, 0.1) == pytest.approx(0.05 / math.sqrt(0.1))
    assert fal(0.0, 0.25, 0.01) == 0.0


def test_fal_is_continuous_at_the_band_edge() -> None:
    for alpha in (0.0, 0.25, 0.5, 0.75, 1.0):
        delta = 0.2
        assert fal(delta, alpha, delta) == pytest.approx(fal(delta * (1 + 1e-12), alpha, delta))


@given(e=finite, delta=st.floats(min_value=1e-6, max_value=10.0))
def test_fal_with_alpha_one_is_the_identity(e: float, delta: float) -> None:
    assert fal(e, 1.0, delta) == pytest.approx(e)


@given(
    e1=finite,
    e2=finite,
    alpha=st.floats(min_value=0.0, max_value=1.0),
    delta=st.floats(min_value=1e-3, max_value=10.0),
)
def test_fal_is_odd_and_non_decreasing(e1: float, e2: float, alpha: float, delta: float) -> None:
    assert fal(-e1, alpha, delta) == -fal(e1, alpha, delta)
    lo, hi = sorted((e1, e2))
    assert fal(lo, alpha, delta) <= fal(hi, alpha, delta) + 1e-12


@pytest.mark.parametrize(
    ("args", "argument"),
    [
        ((math.nan, 0.5, 0.1), "e"),
        ((1.0, 1.5, 0.1), "alpha"),
        ((1.0, -0.1, 0.1), "alpha"),
        ((1.0, 0.5, 0.0), "delta"),
        ((1.0, 0.5, math.inf), "delta"),
    ],
)
def test_fal_rejects_bad_arguments(args: tuple[float, float, float], argument: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        fal(*args)
    assert info.value.argument == argument


# --- fhan --------------------------------------------------------------------------------


@given(
    x1=finite,
    x2=finite,
    r=st.floats(min_value=1e-3, max_value=1e4),
    h=st.floats(min_value=1e-4, max_value=0.1),
)
def test_fhan_is_bounded_by_r_and_odd(x1: float, x2: float, r: float, h: float) -> None:
    u = fhan(x1, x2, r, h)
    assert abs(u) <= r * (1 + 1e-12)
    assert fhan(-x1, -x2, r, h) == pytest.approx(-u, rel=1e-9, abs=1e-12)


def test_fhan_pushes_towards_the_origin() -> None:
    assert fhan(0.0, 0.0, 10.0, 0.01) == 0.0
    assert fhan(5.0, 0.0, 10.0, 0.01) == -10.0  # far above: full effort downwards
    assert fhan(-5.0, 0.0, 10.0, 0.01) == 10.0


@pytest.mark.parametrize(
    ("args", "argument"),
    [
        ((math.nan, 0.0, 1.0, 0.01), "x1"),
        ((0.0, math.inf, 1.0, 0.01), "x2"),
        ((0.0, 0.0, 0.0, 0.01), "r"),
        ((0.0, 0.0, 1.0, -0.01), "h"),
    ],
)
def test_fhan_rejects_bad_arguments(args: tuple[float, float, float, float], argument: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        fhan(*args)
    assert info.value.argument == argument


# --- tracking differentiator ------------------------------------------------------------


@pytest.mark.parametrize("r", [10.0, 100.0, 400.0])
def test_unit_step_is_tracked_in_about_two_over_root_r_without_overshoot(r: float) -> None:
    h = 1e-3
    td = TrackingDifferentiator(r, h)
    ideal = 2.0 / math.sqrt(r)  # bang-bang time to move 1 with acceleration bound r
    xs = [td.update(1.0)[0] for _ in range(round(3 * ideal / h))]
    outside = [k for k, x in enumerate(xs) if abs(x - 1.0) > 1e-3]
    t_track = (outside[-1] + 1) * h
    # Measured: 0.975–0.98 × 2/√r at h = 1 ms (the last 1e-3 is crossed just before the end).
    assert 0.9 * ideal <= t_track <= 1.1 * ideal
    assert max(xs) - 1.0 < 1e-5
    assert xs[-1] == pytest.approx(1.0, abs=1e-9)


def test_x2_estimates_the_derivative_of_a_smooth_signal() -> None:
    h = 1e-3
    td = TrackingDifferentiator(2000.0, h)
    errors = []
    for k in range(3000):
        t = k * h
        _, x2 = td.update(math.sin(2.0 * t))
        if t > 1.0:
            errors.append(abs(x2 - 2.0 * math.cos(2.0 * t)))
    assert max(errors) < 0.05


def test_reset_and_initial_state() -> None:
    td = TrackingDifferentiator(50.0, 0.01, x1=0.5)
    first = [td.update(1.0) for _ in range(20)]
    td.reset()
    assert (td.x1, td.x2) == (0.5, 0.0)
    assert [td.update(1.0) for _ in range(20)] == first
    td.reset(x1=2.0, x2=-1.0)
    assert (td.x1, td.x2) == (2.0, -1.0)


def test_larger_filter_step_smooths_more() -> None:
    h = 1e-3
    sharp = TrackingDifferentiator(100.0, h)
    smooth = TrackingDifferentiator(100.0, h, h0=0.02)
    assert smooth.h0 == 0.02
    peak_sharp = max(abs(sharp.update(1.0)[1]) for _ in range(600))
    peak_smooth = max(abs(smooth.update(1.0)[1]) for _ in range(600))
    assert peak_smooth < peak_sharp


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [({"r": 0.0}, "r"), ({"h": 0.0}, "h"), ({"h0": -1.0}, "h0"), ({"x1": math.nan}, "x1")],
)
def test_td_rejects_bad_arguments(kwargs: dict[str, float], argument: str) -> None:
    args: dict[str, float] = {"r": 10.0, "h": 0.01} | kwargs
    with pytest.raises(ConfigurationError) as info:
        TrackingDifferentiator(**args)
    assert info.value.argument == argument
    with pytest.raises(ConfigurationError, match="v="):
        TrackingDifferentiator(10.0, 0.01).update(math.nan)
