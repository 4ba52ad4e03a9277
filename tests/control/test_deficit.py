"""The capacity-deficit observer: it leads a rising shortfall and holds a lasting one."""

from __future__ import annotations

import pytest

from closedloop import ConfigurationError
from closedloop.control import AIMDConfig, AIMDLimiter, DeficitConfig, DeficitObserver


def _sequence() -> list[tuple[float, float, float]]:
    """(delay ratio, loss share, control) per 1-s window: calm, decline, sustained failure
    with the control saturated (the limit at its floor, u = 1 in the unit the ESO sees)."""
    calm = [(0.1, 0.0, 0.2)] * 60
    decline = [(0.1 + 3.9 * k / 30, 0.0, 0.2 + 0.8 * k / 30) for k in range(30)]
    failure = [(6.0, 1.0, 1.0)] * 240
    return calm + decline + failure


def test_a_sustained_failure_is_held_not_faded() -> None:
    obs = DeficitObserver()
    seq = _sequence()
    estimates = [obs.update(ratio, loss, 1.0) for ratio, loss, _u in seq]
    calm, failure = estimates[:60], estimates[90:]
    assert max(calm) < 0.1
    peak = max(failure)
    assert peak == pytest.approx(1.0, abs=0.01)
    # The last 200 windows of the failure: the estimate stays at its peak.
    assert min(failure[40:]) >= 0.98 * peak


def test_a_rising_shortfall_is_reported_ahead_of_the_level() -> None:
    ahead, level = DeficitObserver(), DeficitObserver(DeficitConfig(horizon_s=0.0))
    for k in range(10):
        ratio = 0.2 * k  # the queueing delay grows a fifth of the base a window
        ahead.update(ratio, 0.0, 1.0)
        level.update(ratio, 0.0, 1.0)
    assert ahead.estimate > level.estimate + 0.05


def test_calm_returns_the_estimate_to_zero() -> None:
    obs = DeficitObserver()
    for _ in range(30):
        obs.update(8.0, 1.0, 1.0)
    for _ in range(30):
        obs.update(0.0, 0.0, 1.0)
    assert obs.estimate < 0.02


def test_a_long_window_stays_stable() -> None:
    obs = DeficitObserver(DeficitConfig(bandwidth=5.0))
    for _ in range(50):
        obs.update(4.0, 0.0, 10.0)
    assert obs.estimate == pytest.approx(1.0, abs=1e-6)


def test_bad_input_is_named() -> None:
    with pytest.raises(ConfigurationError, match="dt"):
        DeficitObserver().update(0.0, 0.0, 0.0)
    with pytest.raises(ConfigurationError, match="bandwidth"):
        DeficitConfig(bandwidth=0.0)


def test_limiters_feed_their_observer_every_window() -> None:
    limiter = AIMDLimiter(AIMDConfig(window_s=1.0))
    for t in range(10):
        limiter.record(t + 0.5, 0.1, "rejected", 1)
    limiter.poll(10.0)
    assert limiter.deficit.estimate > 0.9
    assert limiter.last_window is not None and limiter.last_window.loss_share == 1.0
