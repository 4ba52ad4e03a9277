"""Incremental (velocity-form) PID: each update computes Δu and adds it to the last output.

Δu is the difference of the positional terms between two updates,
``Δu = (P_k − P_{k−1}) + ki·e_k·dt_k + (D_k − D_{k−1})``, so while the output stays
inside its limits the sequence of outputs equals that of :class:`~closedloop.control.PID`
with the same derivative mode and no anti-windup. Because the controller accumulates the
clipped output rather than an integral, a saturated actuator cannot wind it up: the first
Δu that points back inside the limits moves the output at once.
"""

from __future__ import annotations

from .._exceptions import ConfigurationError
from .._validation import require_finite, require_positive
from ._pid import _DERIVATIVE_ON, _check_update, _choice, _clamp, _Tunable

__all__ = ["IncrementalPID"]


class IncrementalPID(_Tunable):
    """A PID in velocity form: ``u_k = clip(u_{k−1} + Δu_k)``.

    Call it with each new measurement: ``u = pid(y, dt=h)``; ``dt`` may be left out when a
    default ``dt`` was given to the constructor. ``last_delta`` is the Δu of the last
    update (before clipping), ``output`` the current output.

    Args:
        kp, ki, kd: non-negative gains, as in :class:`~closedloop.control.PID`.
        setpoint: the target value; settable at any time.
        output_limits: ``(lower, upper)``, either may be ``None`` for no limit.
        dt: the default time step, used when a call gives none.
        derivative_on: ``"measurement"`` or ``"error"``, as in ``PID``.
        starting_output: the output before the first update (clipped to the limits).
    """

    __slots__ = (
        "_d",
        "_d_on_meas",
        "_default_dt",
        "_delta",
        "_last_error",
        "_last_input",
        "_output",
        "_p",
        "_starting_output",
    )
    # The state that changes on every update; declared here because reset() sets it.
    _p: float
    _d: float
    _delta: float
    _output: float
    _last_error: float | None
    _last_input: float

    # The first keywords repeat PID's on purpose: each controller spells out its own
    # signature; the checks behind them are shared (_Tunable, _check_update).
    def __init__(
        self,
        kp: float,
        ki: float,
        kd: float,
        *,
        setpoint: float = 0.0,
        output_limits: tuple[float | None, float | None] = (None, None),
        dt: float | None = None,
        derivative_on: str = "measurement",
        starting_output: float = 0.0,
    ) -> None:
        self._init_tunable((kp, ki, kd), setpoint, output_limits)
        self._default_dt = None if dt is None else require_positive("dt", dt)
        self._d_on_meas = _choice("derivative_on", derivative_on, _DERIVATIVE_ON) == 0
        self._starting_output = require_finite("starting_output", starting_output)
        self.reset()

    def __call__(self, measurement: float, dt: float | None = None) -> float:
        """Update with ``measurement`` over ``dt`` seconds and return the new output."""
        _check_update(measurement, dt)
        if dt is None:
            dt = self._default_dt
            if dt is None:
                raise ConfigurationError("dt", dt, "give dt per call or a default dt")

        error = self._setpoint - measurement
        last_error = self._last_error
        if last_error is None:
            d = 0.0
        elif self._d_on_meas:
            d = -self._kd * (measurement - self._last_input) / dt
        else:
            d = self._kd * (error - last_error) / dt
        p = self._kp * error
        delta = (p - self._p) + self._ki * error * dt + (d - self._d)

        output = self._output + delta
        if output > self._upper:
            output = self._upper
        elif output < self._lower:
            output = self._lower

        self._p = p
        self._d = d
        self._delta = delta
        self._output = output
        self._last_error = error
        self._last_input = measurement
        return output

    def reset(self) -> None:
        """Forget all history: the next call behaves exactly like the first call of a new one."""
        self._p = 0.0
        self._d = 0.0
        self._delta = 0.0
        self._output = _clamp(self._starting_output, self._lower, self._upper)
        self._last_error = None
        self._last_input = 0.0

    @property
    def last_delta(self) -> float:
        """Δu of the last update, before the output was clipped to the limits."""
        return self._delta

    @property
    def output(self) -> float:
        """The current output (``starting_output`` before the first update)."""
        return self._output

    def _limits_changed(self) -> None:
        self._output = _clamp(self._output, self._lower, self._upper)

    def __repr__(self) -> str:
        return (
            f"IncrementalPID(kp={self._kp!r}, ki={self._ki!r}, kd={self._kd!r}, "
            f"setpoint={self._setpoint!r}, output_limits={self.output_limits!r})"
        )
