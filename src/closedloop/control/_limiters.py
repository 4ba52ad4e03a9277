"""Adaptive concurrency limits for a client of a rate-limited provider.

Three published rules share one windowed frame (samples in, a limit out at each window's
end, every time passed in explicitly):

- **AIMD** (Chiu and Jain, 1989; Netflix concurrency-limits ``AIMDLimit``): multiply the
  limit by ``backoff`` after a window with a rejection or timeout, add ``increase``
  after a clean window in which the limit was in use.
- **Gradient** (Envoy's adaptive concurrency filter; Netflix ``Gradient2Limit``):
  gradient = clamp((base + buffer·base) / sample, 0.5, 2); limit = gradient·limit + √limit,
  smoothed; a rejection backs off as AIMD does, since a 429 carries no latency.
- **Delay PID**: the library's :class:`PID` holds the queueing delay, measured as
  (window p50 − base) / base, plus ``drop_weight`` × the window's rejection share, at a
  setpoint; its output is the limit.

``base`` is the smallest window p10 latency of the last ``base_windows`` windows (the
uncongested latency, re-learnt as the windows roll, as Vegas and Gradient2 do). With
``frozen=True`` a limiter keeps measuring (its onset flag still works) but its limit stays
at ``initial``: the frozen arm of an on-against-frozen comparison.

The onset flag (:attr:`congested`) is an EWMA of the delay ratio with hysteresis: it rises
above ``flag_on`` before the provider's buckets or queue reject, when queueing delay grows
ahead of the rejections, and falls below ``flag_off``. :attr:`deficit` is a
:class:`~closedloop.control.DeficitObserver` fed every window (delay ratio and loss share):
an estimate d of the capacity deficit that leads a rising shortfall. With ``feedforward``
k > 0 it acts as a feed-forward on the limit: the rule above moves the feedback limit
(:attr:`feedback_limit`), and the limit enforced is feedback limit × (1 − k·d'), so a
deficit the observer sees coming lowers the limit before the rule's own error has grown.
d' is d less its own average over ``washout_s`` (a washout, as feed-forward of a measured
disturbance is usually filtered): the part of a deficit that has lasted is the feedback's
to hold, and taking it off a second time would hold the limit below what the provider can
serve. With ``washout_s`` = 0, d' = d. With k = 0 (the default) the estimate is only
reported.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Literal

from .._exceptions import ConfigurationError
from .._validation import require_non_negative, require_positive, require_unit_interval
from ._deficit import DeficitObserver
from ._pid import PID

__all__ = [
    "AIMDConfig",
    "AIMDLimiter",
    "DelayPIDConfig",
    "DelayPIDLimiter",
    "GradientConfig",
    "GradientLimiter",
    "LimiterConfig",
    "Outcome",
]

Outcome = Literal["ok", "rejected", "timeout", "error"]
_OUTCOMES = ("ok", "rejected", "timeout", "error")
_CATCH_UP = 100  # at most this many windows closed by one poll (a start far in the past)


@dataclass(frozen=True)
class LimiterConfig:
    """What every limiter shares: bounds, window, base horizon, the onset flag and the
    deficit feed-forward (gain ``feedforward`` in [0, 1], washout ``washout_s``)."""

    initial: float = 20.0
    min_limit: float = 1.0
    max_limit: float = 1000.0
    window_s: float = 1.0
    base_windows: int = 30
    flag_on: float = 1.0
    flag_off: float = 0.5
    flag_alpha: float = 0.3
    feedforward: float = 0.0
    washout_s: float = 0.0
    frozen: bool = False

    def __post_init__(self) -> None:
        require_positive("min_limit", self.min_limit)
        require_positive("window_s", self.window_s)
        if not self.min_limit <= self.initial <= self.max_limit:
            raise ConfigurationError(
                "initial", self.initial, "must lie between min_limit and max_limit"
            )
        if self.base_windows < 1:
            raise ConfigurationError("base_windows", self.base_windows, "must be >= 1")
        if self.flag_off > self.flag_on:
            raise ConfigurationError("flag_off", self.flag_off, "must be <= flag_on")
        require_unit_interval("flag_alpha", self.flag_alpha)
        require_unit_interval("feedforward", self.feedforward)
        require_non_negative("washout_s", self.washout_s)


@dataclass(frozen=True)
class AIMDConfig(LimiterConfig):
    """AIMD: ``backoff`` in (0, 1) on a loss window, ``+increase`` on a clean busy one."""

    backoff: float = 0.9
    increase: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0.0 < self.backoff < 1.0:
            raise ConfigurationError("backoff", self.backoff, "must lie in (0, 1)")
        require_positive("increase", self.increase)


@dataclass(frozen=True)
class GradientConfig(LimiterConfig):
    """Gradient limiter: tolerated delay ``buffer`` × base, EWMA ``smoothing``."""

    buffer: float = 0.5
    smoothing: float = 0.2
    backoff: float = 0.9

    def __post_init__(self) -> None:
        super().__post_init__()
        require_positive("buffer", self.buffer)
        require_unit_interval("smoothing", self.smoothing)
        if not 0.0 < self.backoff < 1.0:
            raise ConfigurationError("backoff", self.backoff, "must lie in (0, 1)")


@dataclass(frozen=True)
class DelayPIDConfig(LimiterConfig):
    """PID on the delay ratio: setpoint, gains (limit per unit ratio) and the loss weight."""

    setpoint: float = 0.8
    kp: float = 2.0
    ki: float = 2.0
    drop_weight: float = 2.0

    def __post_init__(self) -> None:
        super().__post_init__()
        require_positive("setpoint", self.setpoint)
        require_positive("drop_weight", self.drop_weight)


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass(frozen=True)
class Window:
    """One closed window: its latencies' p50 and p10, loss share and peak in-flight."""

    p50: float | None
    p10: float | None
    samples: int
    losses: int
    peak_inflight: int
    dt: float

    @property
    def loss_share(self) -> float:
        return self.losses / self.samples if self.samples else 0.0


class _WindowedLimiter:
    """Collects samples, closes windows on the caller's clock, keeps base and onset flag."""

    def __init__(self, config: LimiterConfig, start: float = 0.0) -> None:
        self.config = config
        self.limit = float(config.initial)
        self.feedback_limit = float(config.initial)
        self._absorbed = 0.0
        self._start = start
        self._latencies: list[float] = []
        self._samples = 0
        self._losses = 0
        self._peak = 0
        self._bases: deque[float] = deque(maxlen=config.base_windows)
        self._ratio_ewma = 0.0
        self.congested = False
        self.delay_ratio = 0.0
        self.deficit = DeficitObserver()
        self.last_window: Window | None = None

    @property
    def base(self) -> float | None:
        """The uncongested latency estimate, or ``None`` before any successful sample."""
        return min(self._bases) if self._bases else None

    def record(self, now: float, latency_s: float, outcome: Outcome, inflight: int) -> float:
        """Add one finished attempt (``inflight`` counted when it was sent); returns the limit."""
        if outcome not in _OUTCOMES:
            raise ConfigurationError("outcome", outcome, f"must be one of {_OUTCOMES}")
        if not math.isfinite(latency_s) or latency_s < 0:
            raise ConfigurationError("latency_s", latency_s, "must be finite and >= 0")
        self.poll(now)
        self._samples += 1
        self._peak = max(self._peak, inflight)
        if outcome == "ok":
            self._latencies.append(latency_s)
        else:
            self._losses += 1
        return self.limit

    def poll(self, now: float) -> float:
        """Close every window that ended by ``now``; returns the limit."""
        width = self.config.window_s
        closed = 0
        while now - self._start >= width:
            if closed >= _CATCH_UP:  # a long silence: more empty windows say nothing more
                self._start += math.floor((now - self._start) / width) * width
                break
            self._close(width)
            self._start += width
            closed += 1
        return self.limit

    def _close(self, dt: float) -> None:
        lat = self._latencies
        window = Window(
            p50=_p(lat, 0.5) if lat else None,
            p10=_p(lat, 0.1) if lat else None,
            samples=self._samples,
            losses=self._losses,
            peak_inflight=self._peak,
            dt=dt,
        )
        self._latencies, self._samples, self._losses, self._peak = [], 0, 0, 0
        if window.p10 is not None:
            self._bases.append(window.p10)
        base = self.base
        if window.p50 is not None and base:
            self.delay_ratio = max(0.0, (window.p50 - base) / base)
        a = self.config.flag_alpha
        self._ratio_ewma = (1 - a) * self._ratio_ewma + a * self.delay_ratio
        if self._ratio_ewma > self.config.flag_on:
            self.congested = True
        elif self._ratio_ewma < self.config.flag_off:
            self.congested = False
        self.last_window = window
        if window.samples:  # an empty window says nothing of the provider: hold
            self.deficit.update(self.delay_ratio, window.loss_share, dt)
        if self.config.frozen:
            return
        if window.samples:
            self.feedback_limit = self._clamp(self._adjust(window))
        cut = self.config.feedforward * self._unabsorbed(window.dt)
        self.limit = self._clamp(self.feedback_limit * (1.0 - cut))

    def _unabsorbed(self, dt: float) -> float:
        estimate, washout = self.deficit.estimate, self.config.washout_s
        if not washout:
            return estimate
        self._absorbed += min(1.0, dt / washout) * (estimate - self._absorbed)
        return max(0.0, estimate - self._absorbed)

    def _clamp(self, limit: float) -> float:
        return min(self.config.max_limit, max(self.config.min_limit, limit))

    def _adjust(self, window: Window) -> float:  # pragma: no cover - abstract
        raise NotImplementedError


class AIMDLimiter(_WindowedLimiter):
    """Additive increase while the limit is in use, multiplicative decrease on loss."""

    config: AIMDConfig

    def __init__(self, config: AIMDConfig | None = None, start: float = 0.0) -> None:
        super().__init__(config or AIMDConfig(), start)

    def _adjust(self, window: Window) -> float:
        limit = self.feedback_limit
        if window.losses:
            return limit * self.config.backoff
        # Only a limit that was reached says anything about the provider (app-limited else).
        if window.peak_inflight * 2 >= self.limit:
            return limit + self.config.increase
        return limit


class GradientLimiter(_WindowedLimiter):
    """Envoy/Gradient2: scale the limit by the latency gradient, plus √limit headroom."""

    config: GradientConfig

    def __init__(self, config: GradientConfig | None = None, start: float = 0.0) -> None:
        super().__init__(config or GradientConfig(), start)

    def _adjust(self, window: Window) -> float:
        cfg, limit = self.config, self.feedback_limit
        if window.losses:
            return limit * cfg.backoff
        base = self.base
        if window.p50 is None or base is None:
            return limit
        gradient = min(2.0, max(0.5, base * (1 + cfg.buffer) / window.p50))
        if window.peak_inflight * 2 < self.limit:
            gradient = min(gradient, 1.0)  # app-limited: no evidence to grow on
        target = gradient * limit + math.sqrt(limit)
        return (1 - cfg.smoothing) * limit + cfg.smoothing * target


class DelayPIDLimiter(_WindowedLimiter):
    """The library's PID holding the queueing-delay ratio (plus loss) at a setpoint."""

    config: DelayPIDConfig

    def __init__(self, config: DelayPIDConfig | None = None, start: float = 0.0) -> None:
        cfg = config or DelayPIDConfig()
        super().__init__(cfg, start)
        self._pid = PID(
            cfg.kp,
            cfg.ki,
            0.0,
            setpoint=cfg.setpoint,
            output_limits=(cfg.min_limit, cfg.max_limit),
            starting_output=cfg.initial,
        )
        self.measurement = 0.0

    def _adjust(self, window: Window) -> float:
        # No latency this window (everything rejected): the loss term alone speaks.
        ratio = self.delay_ratio if window.p50 is not None else 0.0
        self.measurement = ratio + self.config.drop_weight * window.loss_share
        if window.peak_inflight * 2 < self.limit and self.measurement < self.config.setpoint:
            return self.feedback_limit  # app-limited: hold rather than wind the integral up
        return self._pid(self.measurement, dt=window.dt)
