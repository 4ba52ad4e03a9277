"""An observer of a provider's capacity deficit that holds a lasting disturbance.

The measured shortfall of one window is y = max(loss share, min(1, delay ratio / s)):
the share of attempts refused (429/503/timeout), or the queueing delay (p50 over the
uncongested base, minus one) scaled so that a delay of ``s`` times the base counts as
fully short. A second-order linear extended state observer (Han 2009; Gao 2003: the
bandwidth parameterisation, both poles at ω) tracks its level z1 and its rate z2::

    e = y − z1;  z1 += dt·(z2 + 2ω·e);  z2 += dt·ω²·e

The estimate is z1 + z2·horizon, clamped to [0, 1]: a rising shortfall is reported
``horizon`` seconds ahead, which is the point of watching queueing delay before the
buckets empty.

Why no control input: a regression of the shortfall on the limit (the client's control)
cannot tell them apart once the limit saturates at its floor while the shortfall stays
high: the two are collinear, and the regression hands the failure to the input, so the
estimate fades while the failure lasts. This observer is driven by the measurement
alone; a constant shortfall is a fixed point (e = 0, z2 = 0), whatever the control does.
ω·dt is capped at 0.5 (a double discrete pole at 0.5) so a long window stays stable.
"""

from __future__ import annotations

from dataclasses import dataclass

from .._exceptions import ConfigurationError
from .._validation import require_non_negative, require_positive

__all__ = ["DeficitConfig", "DeficitObserver"]


@dataclass(frozen=True)
class DeficitConfig:
    """Observer bandwidth ω (rad/s), look-ahead ``horizon_s`` and delay scale ``s``."""

    bandwidth: float = 0.5
    horizon_s: float = 2.0
    delay_scale: float = 4.0

    def __post_init__(self) -> None:
        require_positive("bandwidth", self.bandwidth)
        require_non_negative("horizon_s", self.horizon_s)
        require_positive("delay_scale", self.delay_scale)


class DeficitObserver:
    """Feed one window at a time with :meth:`update`; read :attr:`estimate`."""

    def __init__(self, config: DeficitConfig | None = None) -> None:
        self.config = config or DeficitConfig()
        self.level = 0.0
        self.trend = 0.0
        self.estimate = 0.0

    @staticmethod
    def shortfall(delay_ratio: float, loss_share: float, delay_scale: float) -> float:
        """The window's measured shortfall y in [0, 1]."""
        return max(min(1.0, max(0.0, loss_share)), min(1.0, max(0.0, delay_ratio) / delay_scale))

    def update(self, delay_ratio: float, loss_share: float, dt: float) -> float:
        """One window's delay ratio and loss share over ``dt`` seconds; returns the estimate."""
        if not dt > 0:
            raise ConfigurationError("dt", dt, "must be > 0")
        cfg = self.config
        y = self.shortfall(delay_ratio, loss_share, cfg.delay_scale)
        w = min(cfg.bandwidth, 0.5 / dt)
        e = y - self.level
        self.level += dt * (self.trend + 2 * w * e)
        self.trend += dt * w * w * e
        self.estimate = min(1.0, max(0.0, self.level + self.trend * cfg.horizon_s))
        return self.estimate
