"""Reference plants and step-response metrics for tuning, tests and the control demo.

Each plant is a small stateful simulator advanced by an explicit step ``h`` (forward
Euler), so a closed loop can be simulated exactly and fast, without a wall clock.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from .._validation import require_finite, require_non_negative, require_positive

__all__ = ["FOPDTPlant", "FirstOrderPlant", "SecondOrderPlant", "StepMetrics", "step_metrics"]


class FirstOrderPlant:
    """``T·y' = −y + K·(u + d)``: a first-order lag, with an input disturbance ``d``."""

    def __init__(self, K: float = 1.0, T: float = 1.0, *, h: float, y0: float = 0.0) -> None:
        self.K = require_finite("K", K)
        self.T = require_positive("T", T)
        self.h = require_positive("h", h)
        self.y = require_finite("y0", y0)

    def step(self, u: float, disturbance: float = 0.0) -> float:
        """Advance one Euler step of ``h`` under ``u`` plus ``disturbance``; the new output."""
        self.y += self.h * (-self.y + self.K * (u + disturbance)) / self.T
        return self.y


class SecondOrderPlant:
    """``K / (T·s + 1)²``: two equal lags, ``T²·y'' + 2T·y' + y = K·(u + d)``."""

    def __init__(self, K: float = 1.0, T: float = 1.0, *, h: float) -> None:
        self.K = require_finite("K", K)
        self.T = require_positive("T", T)
        self.h = require_positive("h", h)
        self.y = 0.0
        self.dy = 0.0

    def step(self, u: float, disturbance: float = 0.0) -> float:
        """Advance one Euler step of ``h`` under ``u`` plus ``disturbance``; the new output."""
        ddy = (self.K * (u + disturbance) - self.y - 2.0 * self.T * self.dy) / (self.T * self.T)
        self.y += self.h * self.dy
        self.dy += self.h * ddy
        return self.y


class FOPDTPlant:
    """First order plus dead time: ``τ·y' = −y + k·u(t − θ)``."""

    def __init__(self, k: float = 1.0, tau: float = 1.0, theta: float = 0.0, *, h: float) -> None:
        self.k = require_finite("k", k)
        self.tau = require_positive("tau", tau)
        self.theta = require_non_negative("theta", theta)
        self.h = require_positive("h", h)
        self.y = 0.0
        delay = round(self.theta / self.h)
        self._buffer: deque[float] = deque([0.0] * delay, maxlen=delay) if delay else deque()

    def step(self, u: float, disturbance: float = 0.0) -> float:
        """Advance one step of ``h``; the input acts after the dead time. The new output."""
        u_total = u + disturbance
        if self._buffer.maxlen:
            delayed = self._buffer[0]
            self._buffer.append(u_total)
        else:
            delayed = u_total
        self.y += self.h * (-self.y + self.k * delayed) / self.tau
        return self.y


@dataclass(frozen=True, slots=True)
class StepMetrics:
    """Step-response figures; times in seconds, overshoot in percent of the step."""

    overshoot_pct: float
    settling_time: float
    rise_time: float
    steady_state_error: float


def step_metrics(
    t: Sequence[float], y: Sequence[float], setpoint: float, *, band: float = 0.02
) -> StepMetrics:
    """Overshoot, settling time (last exit from ``±band·setpoint``), 10–90 % rise time."""
    if len(t) != len(y) or not t:
        raise ValueError(f"t and y must be non-empty and of equal length, got {len(t)}, {len(y)}")
    r = require_finite("setpoint", setpoint)
    if r == 0.0:
        raise ValueError("setpoint=0.0: step metrics need a non-zero step")
    peak = max(y) if r > 0 else min(y)
    overshoot = max(0.0, (peak - r) / r) * 100.0
    tol = abs(band * r)
    settling = t[0]
    for ti, yi in zip(t, y, strict=True):
        if abs(yi - r) > tol:
            settling = ti
    t10 = next((ti for ti, yi in zip(t, y, strict=True) if yi / r >= 0.1), float("nan"))
    t90 = next((ti for ti, yi in zip(t, y, strict=True) if yi / r >= 0.9), float("nan"))
    return StepMetrics(
        overshoot_pct=overshoot,
        settling_time=settling,
        rise_time=t90 - t10,
        steady_state_error=abs(y[-1] - r),
    )
