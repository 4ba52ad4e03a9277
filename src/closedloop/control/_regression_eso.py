"""An extended state observer for agents (ADRC, Han 2009), fitted over a sliding window.

An agent has no differential equation to observe, so the "extended state" is learned
from data instead: over the last ``window`` tasks (or steps) fit observed quality ``q``
to the control applied ``v`` and the setpoint ``w``,

    q ≈ a·v + b·w + c,

and call whatever the setpoint asked for but the fit does not deliver the total
disturbance, ``f = (1 − b)·w − a·v − c``, clipped to ``[0, 1]``. Since the newest sample
is part of the window, this is ``w − q̂`` at the current point: the setpoint minus the
quality the regression says the agent is currently delivering. ``q̂`` is the same for
every least-squares solution, so ``f_est`` does not depend on how a rank-deficient
window is resolved; only the reported coefficients do, and those are the minimum-norm
ones (``numpy.linalg.lstsq``'s answer).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from .._exceptions import ConfigurationError
from .._validation import require_finite, require_int_at_least

__all__ = ["RegressionESO"]

Sample = tuple[float, float, float]

# The closed form is used only while the centred regressors are clearly independent: the
# smallest eigenvalue of their Gram matrix must exceed this share of the trace of XᵀX (the
# squared scale of the whole problem). Below it (a constant column, v and w almost
# collinear, a column that is negligible next to the others) numpy's SVD-based
# minimum-norm solution takes over; the closed form would fit rounding noise there, and
# its error, about eps/_MIN_CONDITIONING relative, would no longer be negligible.
_MIN_CONDITIONING = 1e-8


def _closed_form(samples: Iterable[Sample], n: int) -> tuple[float, float, float] | None:
    """Least squares via centring and a 2×2 solve; None when ill-conditioned or overflowing.

    With an intercept, the slopes are the regression of centred q on centred (v, w) and
    the intercept is the mean residual; this equals the full 3-column solution whenever
    that one is unique, and costs a fraction of a numpy call.
    """
    rows = list(samples)
    mv = sum(r[0] for r in rows) / n
    mw = sum(r[1] for r in rows) / n
    mq = sum(r[2] for r in rows) / n
    cvv = cww = cvw = cvq = cwq = 0.0
    for v, w, q in rows:
        dv = v - mv
        dw = w - mw
        dq = q - mq
        cvv += dv * dv
        cww += dw * dw
        cvw += dv * dw
        cvq += dv * dq
        cwq += dw * dq
    det = cvv * cww - cvw * cvw
    spread = cvv + cww
    scale = spread + n * (mv * mv + mw * mw + 1.0)
    # det/spread is a lower bound on the smaller eigenvalue of the centred 2×2 Gram matrix.
    if not (
        math.isfinite(det)
        and math.isfinite(scale)
        and math.isfinite(cvq)
        and math.isfinite(cwq)
        and spread > 0.0
        and det / spread > _MIN_CONDITIONING * scale
    ):
        return None
    a = (cww * cvq - cvw * cwq) / det
    b = (cvv * cwq - cvw * cvq) / det
    c = mq - a * mv - b * mw
    if not (math.isfinite(a) and math.isfinite(b) and math.isfinite(c)):
        return None
    return a, b, c


def _min_norm(samples: Iterable[Sample]) -> tuple[float, float, float]:
    """numpy's minimum-norm least squares, scaled uniformly so huge inputs cannot overflow.

    A single scale factor for all of X (and one for q) keeps the minimum-norm solution
    the minimum-norm solution; per-column scaling would not.
    """
    rows = list(samples)
    sx = max(1.0, max(max(abs(v), abs(w)) for v, w, _ in rows))
    sy = max(1.0, max(abs(q) for _, _, q in rows))
    x = np.array([(v / sx, w / sx, 1.0 / sx) for v, w, _ in rows])
    y = np.array([q / sy for _, _, q in rows])
    with np.errstate(all="ignore"):
        try:
            beta = np.linalg.lstsq(x, y, rcond=None)[0]
        except np.linalg.LinAlgError:
            return (math.nan, math.nan, math.nan)
    k = sy / sx
    return float(beta[0]) * k, float(beta[1]) * k, float(beta[2]) * k


class RegressionESO:
    """Sliding-window least-squares estimate of an agent's total disturbance ``f_est``.

    ``update(control, setpoint, quality) -> f_est``: ``control`` is the controller's
    output ``v`` for the step, ``setpoint`` the target ``w`` and ``quality`` the observed
    ``q`` (all usually in ``[0, 1]``, any finite value accepted). Until ``min_samples``
    samples are in the window, ``f_est`` is 0.0 and :attr:`coefficients` is None.

    The estimate is always in ``[0, 1]`` and an update never raises on data: constant or
    collinear windows get the minimum-norm fit; if the arithmetic overflows (inputs near
    the float limits) the estimate falls back to the current shortfall ``w − q``.
    """

    def __init__(self, window: int = 15, min_samples: int = 5) -> None:
        self.min_samples = require_int_at_least("min_samples", min_samples, 1)
        self.window = require_int_at_least("window", window, 1)
        if self.window < self.min_samples:
            raise ConfigurationError(
                "window", window, f"must be >= min_samples ({self.min_samples})"
            )
        self._samples: deque[Sample] = deque(maxlen=self.window)
        self._coefficients: tuple[float, float, float] | None = None
        self._f_est = 0.0

    @property
    def f_est(self) -> float:
        """The latest disturbance estimate, in ``[0, 1]`` (0.0 before ``min_samples``)."""
        return self._f_est

    @property
    def coefficients(self) -> tuple[float, float, float] | None:
        """``(a, b, c)`` of the latest fit ``q ≈ a·v + b·w + c``; None before ``min_samples``."""
        return self._coefficients

    @property
    def samples(self) -> tuple[Sample, ...]:
        """The window, oldest first, as ``(control, setpoint, quality)`` triples."""
        return tuple(self._samples)

    def reset(self) -> None:
        """Empty the window."""
        self._samples.clear()
        self._coefficients = None
        self._f_est = 0.0

    def update(self, control: float, setpoint: float, quality: float) -> float:
        """Add one sample, refit, and return the new ``f_est``."""
        v = require_finite("control", control)
        w = require_finite("setpoint", setpoint)
        q = require_finite("quality", quality)
        self._samples.append((v, w, q))
        self._refit()
        return self._f_est

    def _refit(self) -> None:
        n = len(self._samples)
        if n < self.min_samples:
            self._coefficients = None
            self._f_est = 0.0
            return
        coefficients = _closed_form(self._samples, n) or _min_norm(self._samples)
        a, b, c = coefficients
        v, w, q = self._samples[-1]
        f = (1.0 - b) * w - a * v - c
        if math.isnan(f):
            f = w - q
        self._coefficients = coefficients
        self._f_est = min(1.0, max(0.0, f))

    def state(self) -> dict[str, Any]:
        """A JSON-ready snapshot: settings and the window. :meth:`from_state` inverts it."""
        return {
            "window": self.window,
            "min_samples": self.min_samples,
            "samples": [list(s) for s in self._samples],
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> RegressionESO:
        """Rebuild an estimator from :meth:`state`; its ``f_est`` and fit are restored too."""
        try:
            window = state["window"]
            min_samples = state["min_samples"]
            raw = state["samples"]
        except (KeyError, TypeError):
            raise ConfigurationError(
                "state", state, "must be a mapping with window, min_samples and samples"
            ) from None
        eso = cls(window=window, min_samples=min_samples)
        if isinstance(raw, str | bytes) or not isinstance(raw, Iterable):
            raise ConfigurationError("state['samples']", raw, "must be a list of triples")
        samples: list[Sample] = []
        for i, item in enumerate(raw):
            try:
                v, w, q = item
            except (TypeError, ValueError):
                raise ConfigurationError(
                    f"state['samples'][{i}]", item, "must be a (control, setpoint, quality) triple"
                ) from None
            name = f"state['samples'][{i}]"
            samples.append(
                (require_finite(name, v), require_finite(name, w), require_finite(name, q))
            )
        if len(samples) > eso.window:
            raise ConfigurationError(
                "state['samples']", len(samples), f"holds more samples than window={eso.window}"
            )
        eso._samples.extend(samples)
        if samples:
            eso._refit()
        return eso

    def __repr__(self) -> str:
        return (
            f"RegressionESO(window={self.window}, min_samples={self.min_samples}, "
            f"f_est={self._f_est!r})"
        )
