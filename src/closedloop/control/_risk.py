"""An online risk controller on an acceptance threshold: conformal PID control.

A proposed call is accepted (runs without more samples or a stronger model) when its
confidence is at least a threshold tau in [0, 1]. After each accepted call an outcome
arrives, ``err`` = 1 when the accepted call turned out wrong. The controller moves tau
so that the error rate of accepted calls holds a target ``alpha``, under any shift in
how confidence maps to correctness.

Adaptive conformal inference (Gibbs and Candes, NeurIPS 2021) is an integral controller:
tau_{t+1} = tau_t + gamma (err_t - alpha). Summed over T steps, the mean error differs
from alpha by (tau_T - tau_0) / (gamma T), which tends to 0 because tau is bounded.
Conformal PID control (Angelopoulos, Candes and Tibshirani, NeurIPS 2023) adds to that
integral a proportional part and a forecast of the next score. Here, with
e_t = err_t - alpha and S_t the sum of the e_i:

    tau_{t+1} = clip(tau_0 + kp e_t + ki S_t + kd (e_t - e_{t-1}), lower, upper)

``ki`` alone is adaptive conformal inference with gamma = ki (``AdaptiveThreshold``);
the paper's quantile-tracking step (its "P") is this integral written incrementally,
our ``kp`` is the textbook proportional term on the last error, and ``kd`` a difference
term in place of the paper's learned scorecaster (a feed-forward we do not model).

Anti-windup by clamping the integral: S is kept where ki S alone keeps tau inside
[lower, upper], so after a long run of errors pinned at a limit the threshold leaves
the limit with the first outcomes on the other side instead of first unwinding an
unbounded sum. The paper saturates its integrator with a tangent instead; a clamp needs
no step count and keeps the state a plain sum. The error guarantee above holds over
every stretch where the clamp does not bind.

Feedback arrives only for accepted calls, so a threshold at a limit that accepts
nothing gets no feedback: keep ``upper`` below the largest confidence the sensor
reports. Everything is explicit: no clock, ``update`` advances one outcome, and
``state()`` / ``from_state()`` round-trip the controller as a plain dict.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._exceptions import ConfigurationError
from .._validation import require_finite, require_non_negative, require_unit_interval

__all__ = ["AdaptiveThreshold", "ConformalPID"]

_STATE_KEYS = (
    "alpha",
    "kp",
    "ki",
    "kd",
    "start",
    "lower",
    "upper",
    "integral",
    "last_error",
    "threshold",
    "steps",
    "errors",
)


class ConformalPID:
    """Holds the error rate of accepted calls at ``alpha`` by moving the acceptance
    threshold (conformal PID control, Angelopoulos, Candes and Tibshirani, 2023).

    ``update(err)`` takes one accepted call's outcome (True: it was wrong) and returns
    the new threshold; ``accepts(confidence)`` reads it. ``steps`` and ``errors`` count
    the outcomes seen, so ``realised_error`` is the error rate of accepted calls so far.
    """

    __slots__ = (
        "_alpha",
        "_errors",
        "_integral",
        "_kd",
        "_ki",
        "_kp",
        "_last_error",
        "_lower",
        "_start",
        "_steps",
        "_threshold",
        "_upper",
    )

    def __init__(
        self,
        alpha: float,
        kp: float = 0.0,
        ki: float = 0.05,
        kd: float = 0.0,
        *,
        start: float = 0.5,
        limits: tuple[float, float] = (0.0, 1.0),
    ) -> None:
        self._alpha = require_unit_interval("alpha", alpha)
        self._kp = require_non_negative("kp", kp)
        self._ki = require_non_negative("ki", ki)
        self._kd = require_non_negative("kd", kd)
        self._lower, self._upper = _limits(limits)
        self._start = require_unit_interval("start", start)
        if not self._lower <= self._start <= self._upper:
            raise ConfigurationError("start", start, f"must lie within limits {limits}")
        self._integral = 0.0
        self._last_error = 0.0
        self._threshold = self._start
        self._steps = 0
        self._errors = 0

    @property
    def threshold(self) -> float:
        """The acceptance threshold now: a call is accepted when confidence >= it."""
        return self._threshold

    @property
    def alpha(self) -> float:
        """The target error rate of accepted calls."""
        return self._alpha

    @property
    def steps(self) -> int:
        """How many outcomes of accepted calls the controller has seen."""
        return self._steps

    @property
    def errors(self) -> int:
        """How many of those accepted calls were wrong."""
        return self._errors

    @property
    def realised_error(self) -> float | None:
        """The error rate of the accepted calls seen so far (None before any)."""
        return None if self._steps == 0 else self._errors / self._steps

    def accepts(self, confidence: float) -> bool:
        """Whether a call with this confidence is accepted: confidence >= the threshold."""
        return require_finite("confidence", confidence) >= self._threshold

    def update(self, err: bool) -> float:
        """Feed one accepted call's outcome (True: the call was wrong); return the new
        threshold, raised after an error rate above ``alpha``, lowered below it."""
        if not isinstance(err, bool):
            raise ConfigurationError("err", err, "must be a bool (True: the call was wrong)")
        e = float(err) - self._alpha
        self._integral = self._clamped_integral(self._integral + e)
        tau = self._start + self._kp * e + self._ki * self._integral
        tau += self._kd * (e - self._last_error)
        self._threshold = min(self._upper, max(self._lower, tau))
        self._last_error = e
        self._steps += 1
        self._errors += int(err)
        return self._threshold

    def _clamped_integral(self, value: float) -> float:
        if self._ki == 0.0:
            return value
        low = (self._lower - self._start) / self._ki
        high = (self._upper - self._start) / self._ki
        return min(high, max(low, value))

    def state(self) -> dict[str, Any]:
        """The whole controller, settings and state, as a plain JSON-ready dict."""
        return {
            "alpha": self._alpha,
            "kp": self._kp,
            "ki": self._ki,
            "kd": self._kd,
            "start": self._start,
            "lower": self._lower,
            "upper": self._upper,
            "integral": self._integral,
            "last_error": self._last_error,
            "threshold": self._threshold,
            "steps": self._steps,
            "errors": self._errors,
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> ConformalPID:
        """Rebuild a controller from ``state()``; a missing or bad field is an error."""
        _require_keys(state, _STATE_KEYS)
        pid = ConformalPID(
            state["alpha"],
            state["kp"],
            state["ki"],
            state["kd"],
            start=state["start"],
            limits=(state["lower"], state["upper"]),
        )
        pid._integral = pid._clamped_integral(require_finite("integral", state["integral"]))
        pid._last_error = require_finite("last_error", state["last_error"])
        threshold = require_unit_interval("threshold", state["threshold"])
        pid._threshold = min(pid._upper, max(pid._lower, threshold))
        pid._steps = _count("steps", state["steps"])
        pid._errors = _count("errors", state["errors"])
        if pid._errors > pid._steps:
            raise ConfigurationError("errors", pid._errors, "must be <= steps")
        return pid

    def __repr__(self) -> str:
        return (
            f"ConformalPID(alpha={self._alpha}, kp={self._kp}, ki={self._ki}, kd={self._kd}, "
            f"threshold={self._threshold:.4f}, steps={self._steps})"
        )


def AdaptiveThreshold(
    alpha: float,
    gamma: float = 0.05,
    *,
    start: float = 0.5,
    limits: tuple[float, float] = (0.0, 1.0),
) -> ConformalPID:
    """Adaptive conformal inference (Gibbs and Candes, 2021) on the threshold:
    tau_{t+1} = tau_t + gamma (err_t - alpha), the integral-only conformal PID."""
    return ConformalPID(alpha, 0.0, gamma, 0.0, start=start, limits=limits)


def _limits(limits: tuple[float, float]) -> tuple[float, float]:
    try:
        lower, upper = limits
    except (TypeError, ValueError):
        raise ConfigurationError("limits", limits, "must be a (lower, upper) pair") from None
    lower = require_unit_interval("limits[0]", lower)
    upper = require_unit_interval("limits[1]", upper)
    if lower > upper:
        raise ConfigurationError("limits", limits, "lower limit is above the upper limit")
    return lower, upper


def _require_keys(state: Mapping[str, Any], keys: tuple[str, ...]) -> None:
    """Refuse a saved state that lacks any of ``keys``, naming every one missing."""
    missing = [k for k in keys if k not in state]
    if missing:
        raise ConfigurationError("state", dict(state), f"is missing {', '.join(missing)}")


def _count(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigurationError(name, value, "must be a non-negative integer")
    return value
