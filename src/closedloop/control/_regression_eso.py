"""An extended state observer for agents (ADRC, Han 2009), over a sliding window.

ADRC writes a plant as ``y = f + b0·u``: the output is what the control ``u`` does
through a nominal gain ``b0`` plus one lumped term ``f``, the total disturbance, which
the observer estimates and the controller cancels (Han 2009; Gao 2003 fixes ``b0`` as a
design parameter instead of identifying it). For an agent the output is the step's
shortfall ``y = w − q`` (the setpoint ``w`` minus the observed quality ``q``) and the
control is the effort ``v`` (rigour, retries, strict decoding), which *reduces* the
shortfall. So each step's disturbance is

    d = (w − q) + b0·v,

the shortfall that remained plus the part the effort already cancelled, clipped to
``[0, 1]``. The sign follows: a lower quality, or the same quality bought with more
effort, is a larger disturbance, never a smaller one. ``f_est`` is the weighted
least-squares level of ``d`` over the last ``window`` steps, the weight of a step growing
linearly with its recency (oldest 1, newest ``n``): the newest step counts most, one
step alone cannot swing the estimate all the way, and a run of falling quality gives a
rising estimate.

Earlier versions read ``f`` off a regression of ``q`` on ``(v, w)`` at the newest point,
``f = w − q̂``. In a closed loop that regression is confounded: the controller raises
``v`` *because* quality fell, so the slope of ``q`` on ``v`` takes either sign and the
estimate could fall on a step with ``q = 0`` just because the effort had risen. The fit
``q ≈ a·v + b·w + c`` is still kept, as :attr:`RegressionESO.coefficients`, to show how
the agent's quality has followed effort and setpoint over the window (minimum-norm
least squares when the window is rank-deficient, ``numpy.linalg.lstsq``'s answer); the
estimate no longer depends on it.

An update costs O(1): the estimator keeps two running sums over the window, the plain sum
``S = Σ dᵢ`` and the recency-weighted sum ``T = Σ kᵢ·dᵢ``. Appending ``d`` to a window of
``n < window`` samples adds ``d`` to ``S`` and ``(n+1)·d`` to ``T``; once the window is
full, the oldest sample ``d₁`` leaves and every other weight drops by one, so
``T ← T − S + window·d`` and ``S ← S − d₁ + d``. The sums are kept exactly, as integers
in units of 2⁻⁶⁰ (each ``d`` rounded to that grid, an error below 10⁻¹⁸), so rounding
cannot build up over a long run and an estimator restored from its window (``from_state``)
holds the very sums of the one that was saved: a resumed run continues bit for bit.
The fit, which only a reader of :attr:`RegressionESO.coefficients` needs, is computed
when first read after an update and kept until the next.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from .._exceptions import ConfigurationError
from .._validation import require_finite, require_int_at_least, require_non_negative

__all__ = ["RegressionESO"]

Sample = tuple[float, float, float]

# The closed form is used only while the centred regressors are clearly independent: the
# smallest eigenvalue of their Gram matrix must exceed this share of the trace of XᵀX (the
# squared scale of the whole problem). Below it (a constant column, v and w almost
# collinear, a column that is negligible next to the others) numpy's SVD-based
# minimum-norm solution takes over; the closed form would fit rounding noise there, and
# its error, about eps/_MIN_CONDITIONING relative, would no longer be negligible.
_MIN_CONDITIONING = 1e-8
# The grid the running sums count in: 2⁻⁶⁰, exact in a float, far below any d that matters.
_UNIT = 2**60


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
    """Sliding-window estimate of an agent's total disturbance ``f_est`` (see the module).

    ``update(control, setpoint, quality) -> f_est``: ``control`` is the controller's
    output ``v`` for the step, ``setpoint`` the target ``w`` and ``quality`` the observed
    ``q`` (all usually in ``[0, 1]``, any finite value accepted). ``input_gain`` is ADRC's
    nominal gain ``b0`` of the effort on the shortfall (0 reads the shortfall alone).
    Until ``min_samples`` samples are in the window, ``f_est`` is 0.0 and
    :attr:`coefficients` is None.

    The estimate is always in ``[0, 1]``, never rises when a step's quality rises and
    never falls when a step's effort rises, and an update never raises on data.
    """

    def __init__(self, window: int = 15, min_samples: int = 5, input_gain: float = 0.2) -> None:
        self.input_gain = require_non_negative("input_gain", input_gain)
        self.min_samples = require_int_at_least("min_samples", min_samples, 1)
        self.window = require_int_at_least("window", window, 1)
        if self.window < self.min_samples:
            raise ConfigurationError(
                "window", window, f"must be >= min_samples ({self.min_samples})"
            )
        self._samples: deque[Sample] = deque(maxlen=self.window)
        self._units: deque[int] = deque(maxlen=self.window)  # each d in units of 2⁻⁶⁰
        self._sum = 0  # S = Σ dᵢ over the window, in those units
        self._weighted = 0  # T = Σ kᵢ·dᵢ, k = 1 (oldest) … n (newest)
        self._coefficients: tuple[float, float, float] | None = None
        self._fitted = True  # the fit matches the window (None below min_samples)
        self._f_est = 0.0

    @property
    def f_est(self) -> float:
        """The latest disturbance estimate, in ``[0, 1]`` (0.0 before ``min_samples``)."""
        return self._f_est

    @property
    def coefficients(self) -> tuple[float, float, float] | None:
        """``(a, b, c)`` of the latest fit ``q ≈ a·v + b·w + c``; None before ``min_samples``.

        Fitted when read (O(window)), once per update at most."""
        if not self._fitted:
            n = len(self._samples)
            if n >= self.min_samples:
                self._coefficients = _closed_form(self._samples, n) or _min_norm(self._samples)
            self._fitted = True
        return self._coefficients

    @property
    def samples(self) -> tuple[Sample, ...]:
        """The window, oldest first, as ``(control, setpoint, quality)`` triples."""
        return tuple(self._samples)

    def reset(self) -> None:
        """Empty the window."""
        self._samples.clear()
        self._units.clear()
        self._sum = self._weighted = 0
        self._coefficients = None
        self._fitted = True
        self._f_est = 0.0

    def update(self, control: float, setpoint: float, quality: float) -> float:
        """Add one sample and return the new ``f_est`` (O(1); see the module)."""
        v = require_finite("control", control)
        w = require_finite("setpoint", setpoint)
        q = require_finite("quality", quality)
        sample = (v, w, q)
        d = round(self._disturbance(sample) * _UNIT)
        n = len(self._samples)
        if n == self.window:  # the oldest leaves; every other weight drops by one
            self._weighted += self.window * d - self._sum
            self._sum += d - self._units[0]
        else:
            self._weighted += (n + 1) * d
            self._sum += d
        self._samples.append(sample)
        self._units.append(d)
        self._estimate()
        return self._f_est

    def _estimate(self) -> None:
        n = len(self._samples)
        self._coefficients = None
        self._fitted = n < self.min_samples
        if n < self.min_samples:
            self._f_est = 0.0
            return
        # Weights 1..n: the weighted mean is the least-squares level under those weights.
        self._f_est = min(1.0, max(0.0, (2 * self._weighted) / (n * (n + 1) * _UNIT)))

    def _disturbance(self, sample: Sample) -> float:
        """One step's ``d = (w − q) + b0·v`` in ``[0, 1]``; each term is clipped first, so
        inputs near the float limits cannot overflow into an undefined sum."""
        v, w, q = sample
        shortfall = min(1.0, max(-1.0, w - q)) if math.isfinite(w - q) else math.copysign(1.0, w)
        effort = min(1.0, max(-1.0, v)) * self.input_gain
        return min(1.0, max(0.0, shortfall + effort))

    def state(self) -> dict[str, Any]:
        """A JSON-ready snapshot: settings and the window. :meth:`from_state` inverts it."""
        return {
            "window": self.window,
            "min_samples": self.min_samples,
            "input_gain": self.input_gain,
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
        # Snapshots from before the gain was a setting hold none: the default applies.
        gain = state.get("input_gain", 0.2)
        eso = cls(window=window, min_samples=min_samples, input_gain=gain)
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
        for sample in samples:  # exact sums: the very ones the saved estimator held
            eso.update(*sample)
        return eso

    def __repr__(self) -> str:
        return (
            f"RegressionESO(window={self.window}, min_samples={self.min_samples}, "
            f"input_gain={self.input_gain!r}, f_est={self._f_est!r})"
        )
