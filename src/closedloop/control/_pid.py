"""Positional PID with selectable anti-windup, numerically faithful to simple-pid.

With ``anti_windup="clamp"`` and derivative on the measurement, every update performs
the same floating-point operations in the same order as simple-pid 2.0.1, so the two
agree to the last bit (tests/control/test_pid_differential.py checks this). The other
anti-windup modes differ only in how the integral reacts to a saturated output.

Deliberate differences from simple-pid, each chosen for a control loop that must not
surprise its operator:

- ``reset()`` restores ``starting_output`` as the integral, so a reset controller
  behaves exactly like a fresh one (simple-pid resets the integral to 0).
- Switching to auto mode without ``last_output`` continues from the controller's own
  last output (a bumpless switch); simple-pid starts the integral from 0.
- An explicit ``dt`` never reads the clock. A clock-timed call measures the time since
  the last clock-timed update (or construction/reset); if that time is unknown (the
  previous update used an explicit ``dt``) or not positive, the call holds the last
  output, as if it came too soon. simple-pid would divide by 1e-16 instead.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from .._exceptions import ConfigurationError
from .._validation import require_finite, require_limits, require_non_negative

__all__ = ["PID"]

_ANTI_WINDUP = ("none", "clamp", "conditional", "back_calculation")
_DERIVATIVE_ON = ("measurement", "error")
_PROPORTIONAL_ON = ("error", "measurement")

# Anti-windup modes as small ints: the per-update branch compares ints, not strings.
_NONE, _CLAMP, _CONDITIONAL, _BACK_CALC = range(4)
_INF = math.inf
_isfinite = math.isfinite


def _choice(name: str, value: str, allowed: tuple[str, ...]) -> int:
    if value not in allowed:
        raise ConfigurationError(name, value, f"must be one of {', '.join(map(repr, allowed))}")
    return allowed.index(value)


def _check_update(measurement: float, dt: float | None) -> None:
    """The checks every PID update makes: a finite measurement and a finite ``dt`` > 0."""
    try:
        finite = _isfinite(measurement)
    except TypeError:
        raise ConfigurationError("measurement", measurement, "must be a real number") from None
    if not finite:
        raise ConfigurationError("measurement", measurement, "must be finite")
    if dt is not None and not 0.0 < dt < _INF:
        raise ConfigurationError("dt", dt, "must be finite and > 0")


def _gains(tunings: tuple[float, float, float]) -> tuple[float, float, float]:
    try:
        kp, ki, kd = tunings
    except (TypeError, ValueError):
        raise ConfigurationError("tunings", tunings, "must be a (kp, ki, kd) triple") from None
    return (
        require_non_negative("kp", kp),
        require_non_negative("ki", ki),
        require_non_negative("kd", kd),
    )


def _bounds(limits: tuple[float | None, float | None]) -> tuple[float, float]:
    lower, upper = require_limits("output_limits", limits)
    return (-_INF if lower is None else lower, _INF if upper is None else upper)


def _clamp(value: float, lower: float, upper: float) -> float:
    if value > upper:
        return upper
    if value < lower:
        return lower
    return value


class _Tunable:
    """What both forms of PID share: gains, setpoint and output limits, checked when set.

    A subclass sets them once through :meth:`_init_tunable` and reacts to new limits in
    :meth:`_limits_changed` (whatever state it clips to them).
    """

    __slots__ = ("_kd", "_ki", "_kp", "_lower", "_setpoint", "_upper")

    def _init_tunable(
        self,
        tunings: tuple[float, float, float],
        setpoint: float,
        output_limits: tuple[float | None, float | None],
    ) -> None:
        self._kp, self._ki, self._kd = _gains(tunings)
        self._setpoint = require_finite("setpoint", setpoint)
        self._lower, self._upper = _bounds(output_limits)

    def _limits_changed(self) -> None:
        """Clip the state that must stay inside the new output limits."""

    @property
    def setpoint(self) -> float:
        """The target value."""
        return self._setpoint

    @setpoint.setter
    def setpoint(self, value: float) -> None:
        self._setpoint = require_finite("setpoint", value)

    @property
    def tunings(self) -> tuple[float, float, float]:
        """The gains ``(kp, ki, kd)``; setting them validates all three first."""
        return self._kp, self._ki, self._kd

    @tunings.setter
    def tunings(self, value: tuple[float, float, float]) -> None:
        self._kp, self._ki, self._kd = _gains(value)

    @property
    def output_limits(self) -> tuple[float | None, float | None]:
        """``(lower, upper)``; ``None`` means unbounded on that side."""
        return (
            None if self._lower == -_INF else self._lower,
            None if self._upper == _INF else self._upper,
        )

    @output_limits.setter
    def output_limits(self, limits: tuple[float | None, float | None]) -> None:
        self._lower, self._upper = _bounds(limits)
        self._limits_changed()


class PID(_Tunable):
    """A positional PID controller: ``u = P + I + D``, clipped to ``output_limits``.

    Call it with each new measurement: ``u = pid(y, dt=h)``. Without ``dt`` the time
    since the last update comes from ``time_fn`` (default ``time.monotonic``); the
    controller itself never sleeps.

    Args:
        kp, ki, kd: non-negative gains. The integral term is ``Σ ki·e·dt``; the
            derivative term is ``kd·Δ/dt`` of the measurement (negated) or of the error.
        setpoint: the target value; settable at any time.
        output_limits: ``(lower, upper)``, either may be ``None`` for no limit.
        anti_windup: ``"none"`` (the integral runs free), ``"clamp"`` (the integral is
            clipped to the output limits, as simple-pid does), ``"conditional"`` (no
            integration while the output saturates in the direction the error pushes)
            or ``"back_calculation"`` (the integral is pulled back by
            ``kb·(u_sat − u_unsat)·dt`` each update).
        kb: the back-calculation gain (1/s); ignored by the other modes.
        derivative_on: ``"measurement"`` (no kick on setpoint changes) or ``"error"``.
        proportional_on: ``"error"`` or ``"measurement"`` (simple-pid's
            proportional-on-measurement: the P term accumulates ``−kp·Δy``).
        sample_time: if set, a call less than ``sample_time`` after the last update
            returns the last output unchanged.
        time_fn: the clock used when ``dt`` is not given.
        starting_output: the initial integral (clipped to the limits): the output the
            controller starts from when the error is zero.
    """

    __slots__ = (
        "_auto",
        "_aw",
        "_d",
        "_d_on_meas",
        "_i",
        "_kb",
        "_last_error",
        "_last_input",
        "_last_output",
        "_last_time",
        "_p",
        "_p_on_meas",
        "_sample_time",
        "_starting_output",
        "_time_fn",
    )
    # The state that changes on every update; declared here because reset() sets it.
    _p: float
    _i: float
    _d: float
    _last_output: float | None
    _last_input: float | None
    _last_error: float | None
    _last_time: float | None

    def __init__(
        self,
        kp: float,
        ki: float,
        kd: float,
        *,
        setpoint: float = 0.0,
        output_limits: tuple[float | None, float | None] = (None, None),
        anti_windup: str = "clamp",
        kb: float = 1.0,
        derivative_on: str = "measurement",
        proportional_on: str = "error",
        sample_time: float | None = None,
        time_fn: Callable[[], float] | None = None,
        starting_output: float = 0.0,
    ) -> None:
        self._init_tunable((kp, ki, kd), setpoint, output_limits)
        self._aw = _choice("anti_windup", anti_windup, _ANTI_WINDUP)
        self._kb = require_non_negative("kb", kb)
        self._d_on_meas = _choice("derivative_on", derivative_on, _DERIVATIVE_ON) == 0
        self._p_on_meas = _choice("proportional_on", proportional_on, _PROPORTIONAL_ON) == 1
        self._sample_time = (
            None if sample_time is None else require_non_negative("sample_time", sample_time)
        )
        if time_fn is not None and not callable(time_fn):
            raise ConfigurationError("time_fn", time_fn, "must be a callable returning seconds")
        self._time_fn: Callable[[], float] = time.monotonic if time_fn is None else time_fn
        self._starting_output = require_finite("starting_output", starting_output)
        self._auto = True
        self.reset()

    def __call__(self, measurement: float, dt: float | None = None) -> float:
        """Update with ``measurement`` and return the new output.

        ``dt`` is the time since the previous update (> 0); ``None`` reads ``time_fn``.
        In manual mode, or when called sooner than ``sample_time``, the last output is
        returned and nothing changes.
        """
        _check_update(measurement, dt)
        if not self._auto:
            return self._held_output()
        now: float | None = None
        if dt is None:
            now = self._time_fn()
            last_time = self._last_time
            if last_time is None or now <= last_time:
                if self._last_output is not None:
                    # The elapsed time is unknown or zero: treat the call as too soon.
                    if last_time is None:
                        self._last_time = now
                    return self._last_output
                dt = 1e-16  # first update at the instant of reset: no I or D to compute
            else:
                dt = now - last_time

        last_output = self._last_output
        if self._sample_time is not None and dt < self._sample_time and last_output is not None:
            return last_output

        error = self._setpoint - measurement
        last_input = self._last_input
        d_input = 0.0 if last_input is None else measurement - last_input
        last_error = self._last_error
        d_error = 0.0 if last_error is None else error - last_error

        p = self._p - self._kp * d_input if self._p_on_meas else self._kp * error
        d = -self._kd * d_input / dt if self._d_on_meas else self._kd * d_error / dt

        lower = self._lower
        upper = self._upper
        i = self._i + self._ki * error * dt
        aw = self._aw
        if aw == _CLAMP:
            if i > upper:
                i = upper
            elif i < lower:
                i = lower
            output = p + i + d
        elif aw == _NONE:
            output = p + i + d
        elif aw == _CONDITIONAL:
            output = p + i + d
            if (output > upper and error > 0.0) or (output < lower and error < 0.0):
                # Saturated and the error would drive the integral further out: hold it.
                i = self._i
                output = p + i + d
        else:  # back calculation
            output = p + i + d
            if output > upper:
                i += self._kb * (upper - output) * dt
            elif output < lower:
                i += self._kb * (lower - output) * dt

        if output > upper:
            output = upper
        elif output < lower:
            output = lower

        self._p = p
        self._i = i
        self._d = d
        self._last_output = output
        self._last_input = measurement
        self._last_error = error
        self._last_time = now
        return output

    def _held_output(self) -> float:
        if self._last_output is not None:
            return self._last_output
        return _clamp(self._i, self._lower, self._upper)

    def reset(self) -> None:
        """Forget all history: the next call behaves exactly like the first call of a new PID."""
        self._p = 0.0
        self._d = 0.0
        self._i = _clamp(self._starting_output, self._lower, self._upper)
        self._last_output = None
        self._last_input = None
        self._last_error = None
        self._last_time = self._time_fn()

    @property
    def components(self) -> tuple[float, float, float]:
        """The P, I and D terms of the last update (the output is their clipped sum)."""
        return self._p, self._i, self._d

    def _limits_changed(self) -> None:
        if self._aw == _CLAMP:
            self._i = _clamp(self._i, self._lower, self._upper)
        if self._last_output is not None:
            self._last_output = _clamp(self._last_output, self._lower, self._upper)

    @property
    def anti_windup(self) -> str:
        """The anti-windup mode, one of "none", "clamp", "conditional", "back_calculation"."""
        return _ANTI_WINDUP[self._aw]

    @property
    def auto_mode(self) -> bool:
        """True while the controller computes outputs; False (manual) holds the last one."""
        return self._auto

    @auto_mode.setter
    def auto_mode(self, enabled: bool) -> None:
        self.set_auto_mode(enabled)

    def set_auto_mode(self, enabled: bool, last_output: float | None = None) -> None:
        """Switch between auto and manual without a bump in the output.

        On the switch from manual to auto the history is cleared and the integral starts
        from ``last_output`` (the value the actuator holds now), or, if not given, from
        the controller's own last output. Has no effect if already in auto mode.
        """
        if enabled and not self._auto:
            start = (
                self._held_output()
                if last_output is None
                else require_finite("last_output", last_output)
            )
            self.reset()
            self._i = _clamp(start, self._lower, self._upper)
        self._auto = bool(enabled)

    def __repr__(self) -> str:
        return (
            f"PID(kp={self._kp!r}, ki={self._ki!r}, kd={self._kd!r}, "
            f"setpoint={self._setpoint!r}, output_limits={self.output_limits!r}, "
            f"anti_windup={self.anti_windup!r}, auto_mode={self._auto!r})"
        )
