"""Han Jingqing's nonlinear ADRC pieces: ``fal``, ``fhan`` and the tracking differentiator.

``fal`` is the "small error, large gain; large error, small gain" power law used by
nonlinear observers and error feedback. ``fhan`` is the discrete time-optimal synthesis
function: the acceleration, bounded by ``r``, that brings a double integrator sampled at
``h`` to rest at the origin in the fewest steps without overshoot. The tracking
differentiator uses it to follow a reference as fast as the bound allows and to produce
its derivative as a by-product.
"""

from __future__ import annotations

import math

from .._exceptions import ConfigurationError
from .._validation import require_finite, require_positive

__all__ = ["TrackingDifferentiator", "fal", "fhan"]


def fal(e: float, alpha: float, delta: float) -> float:
    """``|e|^alpha·sign(e)`` outside ``±delta``, the matching straight line inside.

    The linear piece ``e / delta^(1 − alpha)`` removes the infinite slope at zero that a
    bare power law with ``alpha < 1`` would have, so chattering stays bounded.
    ``alpha`` in ``[0, 1]``: 1 is linear, smaller values weigh small errors more.
    """
    e = require_finite("e", e)
    alpha = require_finite("alpha", alpha)
    if not 0.0 <= alpha <= 1.0:
        raise ConfigurationError("alpha", alpha, "must lie in [0, 1]")
    delta = require_positive("delta", delta)
    if abs(e) <= delta:
        return e / math.pow(delta, 1.0 - alpha)
    return math.copysign(math.pow(abs(e), alpha), e)


def _sign(x: float) -> float:
    return 1.0 if x > 0.0 else -1.0 if x < 0.0 else 0.0


def _fhan(x1: float, x2: float, r: float, h: float) -> float:
    d = r * h
    d0 = h * d
    y = x1 + h * x2
    if abs(y) > d0:
        a0 = math.sqrt(d * d + 8.0 * r * abs(y))
        a = x2 + 0.5 * (a0 - d) * _sign(y)
    else:
        a = x2 + y / h
    if abs(a) > d:
        return -r * _sign(a)
    return -r * a / d


def fhan(x1: float, x2: float, r: float, h: float) -> float:
    """Han's discrete time-optimal control for ``x1' = x2, x2' = u, |u| ≤ r``.

    ``x1`` is the position error (state minus target), ``x2`` its rate, ``r`` the
    acceleration bound and ``h`` the filter step (often the sample time; a larger ``h``
    smooths more). Returns the acceleration to apply, in ``[−r, r]``: full effort far
    from the switching curve, a linear blend inside its boundary layer, so the sampled
    trajectory lands on the origin instead of chattering around it.
    """
    return _fhan(
        require_finite("x1", x1),
        require_finite("x2", x2),
        require_positive("r", r),
        require_positive("h", h),
    )


class TrackingDifferentiator:
    """Han's tracking differentiator: ``x1`` follows ``v`` time-optimally, ``x2 ≈ v'``.

    ``r`` bounds the acceleration of ``x1`` (larger ``r``: faster tracking, noisier
    ``x2``); ``h`` is the sample time; ``h0`` the filter step handed to :func:`fhan`
    (defaults to ``h``; a few times ``h`` filters noise in ``v``). A unit step is
    reached in about ``2/√r`` seconds, the time-optimal bang-bang time, without overshoot.
    """

    def __init__(
        self, r: float, h: float, *, h0: float | None = None, x1: float = 0.0, x2: float = 0.0
    ) -> None:
        self.r = require_positive("r", r)
        self.h = require_positive("h", h)
        self.h0 = self.h if h0 is None else require_positive("h0", h0)
        self._initial = (require_finite("x1", x1), require_finite("x2", x2))
        self.x1, self.x2 = self._initial

    def reset(self, x1: float | None = None, x2: float | None = None) -> None:
        """Return to the initial state, or to the one given."""
        self.x1 = self._initial[0] if x1 is None else require_finite("x1", x1)
        self.x2 = self._initial[1] if x2 is None else require_finite("x2", x2)

    def update(self, v: float) -> tuple[float, float]:
        """Advance one sample towards ``v``; return ``(x1, x2)``."""
        v = require_finite("v", v)
        u = _fhan(self.x1 - v, self.x2, self.r, self.h0)
        self.x1 += self.h * self.x2
        self.x2 += self.h * u
        return self.x1, self.x2

    def __repr__(self) -> str:
        return f"TrackingDifferentiator(r={self.r!r}, h={self.h!r}, h0={self.h0!r})"
