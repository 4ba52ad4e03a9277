"""Adaptive concurrency limiters: each rule moves the limit the way its source says."""

from __future__ import annotations

import pytest

from closedloop._exceptions import ConfigurationError
from closedloop.control import (
    AIMDConfig,
    AIMDLimiter,
    DelayPIDConfig,
    DelayPIDLimiter,
    GradientConfig,
    GradientLimiter,
    LimiterConfig,
)


def _feed(
    limiter: AIMDLimiter | GradientLimiter | DelayPIDLimiter,
    latency: float,
    outcome: str = "ok",
    *,
    windows: int = 1,
    start: float = 0.0,
    per: int = 10,
) -> float:
    """``per`` samples in each of ``windows`` one-second windows, then close the last one."""
    t = start
    for w in range(windows):
        for i in range(per):
            t = start + w + i / per
            limiter.record(t, latency, outcome, int(limiter.limit))  # type: ignore[arg-type]
    return limiter.poll(start + windows)


def test_aimd_backs_off_on_loss_and_grows_on_clean_busy_windows() -> None:
    lim = AIMDLimiter(AIMDConfig(initial=20))
    assert _feed(lim, 0.5) == pytest.approx(21.0)
    assert _feed(lim, 0.5, "rejected", start=1.0) == pytest.approx(21.0 * 0.9)


def test_aimd_does_not_grow_when_app_limited() -> None:
    lim = AIMDLimiter(AIMDConfig(initial=20))
    for i in range(10):
        lim.record(i / 10, 0.5, "ok", inflight=3)
    assert lim.poll(1.0) == 20.0


def test_gradient_shrinks_when_latency_rises_over_the_base() -> None:
    lim = GradientLimiter(GradientConfig(initial=20))
    _feed(lim, 0.5, windows=5)
    before = lim.limit
    _feed(lim, 2.0, windows=5, start=5.0)
    assert lim.limit < before * 0.8


def test_pid_holds_a_delay_ratio_and_lowers_the_limit_above_it() -> None:
    lim = DelayPIDLimiter(DelayPIDConfig(initial=20))
    _feed(lim, 0.5, windows=3)
    start = lim.limit
    _feed(lim, 1.5, windows=3, start=3.0)  # ratio 2 against a setpoint of 0.8
    assert lim.limit < start
    assert lim.measurement == pytest.approx(2.0)


def test_frozen_keeps_its_initial_limit_but_still_flags_congestion() -> None:
    lim = DelayPIDLimiter(DelayPIDConfig(initial=20, frozen=True))
    _feed(lim, 0.5, windows=3)
    _feed(lim, 2.0, windows=10, start=3.0)
    assert lim.limit == 20.0
    assert lim.congested


def test_flag_falls_again_when_the_delay_goes_away() -> None:
    lim = AIMDLimiter()
    _feed(lim, 0.5, windows=3)
    _feed(lim, 2.0, windows=10, start=3.0)
    assert lim.congested
    _feed(lim, 0.5, windows=20, start=13.0)
    assert not lim.congested


def test_limits_are_clamped() -> None:
    lim = AIMDLimiter(AIMDConfig(initial=2, min_limit=2))
    _feed(lim, 0.5, "timeout", windows=5)
    assert lim.limit == 2.0


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [({"initial": 0.5}, "initial"), ({"flag_off": 2.0}, "flag_off"), ({"window_s": 0}, "window_s")],
)
def test_bad_config_names_the_argument(kwargs: dict[str, float], name: str) -> None:
    with pytest.raises(ConfigurationError, match=name):
        LimiterConfig(**kwargs)  # type: ignore[arg-type]


def test_bad_outcome_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="outcome"):
        AIMDLimiter().record(0.0, 0.1, "maybe", 1)  # type: ignore[arg-type]


def test_a_start_far_in_the_past_does_not_close_a_window_per_second_since() -> None:
    from closedloop.control import AIMDLimiter as _AIMD

    limiter = _AIMD()  # start 0.0, polled on a wall clock: 1.7e9 windows behind
    assert limiter.poll(1.7e9) == limiter.config.initial
    limiter.record(1.7e9 + 0.5, 0.1, "rejected", 1)
    assert limiter.poll(1.7e9 + 1.0) < limiter.config.initial  # windows close as usual after


def _ramp(limiter: AIMDLimiter | DelayPIDLimiter, start: float, windows: int) -> list[float]:
    """Calm windows, then a queueing delay that grows a fifth of the base each window."""
    limits = []
    for w in range(windows):
        ratio = 0.0 if w < 10 else 0.2 * (w - 10)
        for i in range(10):
            limiter.record(start + w + i / 10, 0.5 * (1 + ratio), "ok", int(limiter.limit))
        limits.append(limiter.poll(start + w + 1))
    return limits


def test_feedforward_lowers_the_limit_on_a_rising_delay_before_any_loss() -> None:
    # AIMD moves only on losses: without the feed-forward a rising delay leaves it growing.
    plain = _ramp(AIMDLimiter(AIMDConfig(initial=20)), 0.0, 16)
    fed = AIMDLimiter(AIMDConfig(initial=20, feedforward=1.0))
    ahead = _ramp(fed, 0.0, 16)
    assert plain[-1] >= plain[10]
    assert ahead[-1] < ahead[10] * 0.8
    assert fed.limit < fed.feedback_limit
    assert fed.last_window is not None and fed.last_window.losses == 0


def test_without_feedforward_the_limit_is_the_feedback_limit() -> None:
    lim = DelayPIDLimiter(DelayPIDConfig(initial=20))
    for w in range(20):
        _feed(lim, 0.5 * (1 + 0.2 * w), start=float(w))
        assert lim.limit == lim.feedback_limit
    assert lim.limit < 20.0  # the feedback itself moved


def test_washout_hands_a_lasting_deficit_back_to_the_feedback() -> None:
    def last_cut(washout_s: float) -> float:
        cfg = AIMDConfig(initial=20, feedforward=1.0, washout_s=washout_s, backoff=0.99)
        lim = AIMDLimiter(cfg)
        _feed(lim, 0.5, windows=10, per=2)
        for w in range(10, 70):  # half the calls refused, for a minute
            lim.record(w + 0.2, 0.5, "ok", 20)
            lim.record(w + 0.6, 0.5, "rejected", 20)
        lim.poll(70.0)
        assert lim.deficit.estimate == pytest.approx(0.5, abs=0.01)
        return 1.0 - lim.limit / lim.feedback_limit

    assert last_cut(0.0) == pytest.approx(0.5, abs=0.01)  # the level form: the whole estimate
    assert last_cut(10.0) < 0.05  # the washout: the lasting part is the feedback's


def test_frozen_ignores_the_feedforward() -> None:
    lim = AIMDLimiter(AIMDConfig(initial=20, feedforward=1.0, frozen=True))
    _ramp(lim, 0.0, 20)
    assert lim.limit == 20.0
    assert lim.deficit.estimate > 0.5


@pytest.mark.parametrize(
    ("kwargs", "name"), [({"feedforward": 1.5}, "feedforward"), ({"washout_s": -1.0}, "washout_s")]
)
def test_bad_feedforward_settings_are_named(kwargs: dict[str, float], name: str) -> None:
    with pytest.raises(ConfigurationError, match=name):
        LimiterConfig(**kwargs)  # type: ignore[arg-type]
