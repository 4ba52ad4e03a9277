"""LatencyTracker: p95 over a window and the predictive dynamic timeout."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from closedloop import ConfigurationError
from closedloop.control import LatencyTracker


def tracker_with(latencies: list[float], **kwargs: float) -> LatencyTracker:
    tracker = LatencyTracker(**kwargs)  # type: ignore[arg-type]
    for latency in latencies:
        tracker.record(latency)
    return tracker


def test_default_until_min_samples() -> None:
    tracker = tracker_with([0.1, 0.2, 0.3, 0.4])
    assert tracker.p95() == 2.0
    assert tracker.dynamic_timeout() == 4.0  # 2 s default with 2× headroom
    tracker.record(0.5)
    assert tracker.p95() == pytest.approx(0.48)  # numpy.percentile([.1 .. .5], 95)


def test_window_keeps_the_latest() -> None:
    tracker = tracker_with([9.0] * 10 + [0.1] * 10)
    assert tracker.samples == (0.1,) * 10
    assert tracker.p95() == pytest.approx(0.1)


def test_normal_service_gets_headroom_above_p95() -> None:
    tracker = tracker_with([0.2, 0.25, 0.3, 0.35, 0.4])
    p95 = tracker.p95()
    assert tracker.dynamic_timeout() == pytest.approx(2.0 * p95)
    assert tracker.dynamic_timeout(headroom=3.0) == pytest.approx(3.0 * p95)
    assert not tracker.degraded


def test_floor_applies_to_very_fast_services() -> None:
    tracker = tracker_with([0.001] * 5)
    assert tracker.dynamic_timeout() == 0.05
    assert tracker.dynamic_timeout(floor_s=0.0) == pytest.approx(0.002)


def test_degraded_service_fails_fast() -> None:
    # Predictive fallback: p95 above 5 s → timeout min(3 s, p95·0.6).
    tracker = tracker_with([6.0, 7.0, 8.0, 9.0, 10.0])
    assert tracker.degraded
    assert tracker.dynamic_timeout() == 3.0
    slightly = tracker_with([5.2] * 5)
    assert slightly.dynamic_timeout() == 3.0
    assert slightly.dynamic_timeout(cap_s=10.0) == pytest.approx(5.2 * 0.6)
    assert tracker.dynamic_timeout(cap_s=10.0, factor=0.5) == pytest.approx(0.5 * tracker.p95())


def test_slow_threshold_is_configurable() -> None:
    tracker = tracker_with([1.0] * 5, slow_threshold_s=0.5)
    assert tracker.degraded
    assert tracker.dynamic_timeout() == pytest.approx(0.6)
    assert tracker.dynamic_timeout(slow_threshold_s=2.0) == pytest.approx(2.0)


def test_reset() -> None:
    tracker = tracker_with([6.0] * 5)
    tracker.reset()
    assert tracker.samples == ()
    assert tracker.p95() == 2.0
    assert not tracker.degraded


@given(
    st.lists(st.floats(min_value=0.0, max_value=100.0), min_size=1, max_size=40),
    st.integers(1, 20),
)
def test_p95_matches_numpy(latencies: list[float], window: int) -> None:
    tracker = tracker_with(latencies, window=window, min_samples=1)
    expected = float(np.percentile(latencies[-window:], 95))
    assert tracker.p95() == pytest.approx(expected, rel=1e-12, abs=1e-12)


@given(st.lists(st.floats(min_value=0.0, max_value=60.0), max_size=30))
def test_timeout_is_positive_and_capped_when_degraded(latencies: list[float]) -> None:
    tracker = tracker_with(latencies)
    timeout = tracker.dynamic_timeout()
    assert timeout >= 0.05
    if tracker.degraded:
        assert timeout <= 3.0


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"window": 0}, "window"),
        ({"window": 3}, "min_samples"),  # min_samples 5 > window 3
        ({"min_samples": 0}, "min_samples"),
        ({"default_s": -1.0}, "default_s"),
        ({"default_s": math.nan}, "default_s"),
        ({"slow_threshold_s": math.inf}, "slow_threshold_s"),
    ],
)
def test_rejects_bad_settings(kwargs: dict[str, float], argument: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        LatencyTracker(**kwargs)  # type: ignore[arg-type]
    assert info.value.argument == argument


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"cap_s": 0.0}, "cap_s"),
        ({"factor": -0.6}, "factor"),
        ({"headroom": math.nan}, "headroom"),
        ({"floor_s": -0.1}, "floor_s"),
        ({"slow_threshold_s": -1.0}, "slow_threshold_s"),
    ],
)
def test_dynamic_timeout_rejects_bad_arguments(kwargs: dict[str, float], argument: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        LatencyTracker().dynamic_timeout(**kwargs)
    assert info.value.argument == argument


@pytest.mark.parametrize("bad", [-0.1, math.nan, math.inf])
def test_rejects_bad_latencies(bad: float) -> None:
    tracker = LatencyTracker()
    with pytest.raises(ConfigurationError) as info:
        tracker.record(bad)
    assert info.value.argument == "latency_s"
    assert tracker.samples == ()
