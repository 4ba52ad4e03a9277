"""Linear extended state observer and linear ADRC, bandwidth-parameterised (Gao 2003).

A plant of order ``n`` is written ``y⁽ⁿ⁾ = f + b0·u``, where ``f`` lumps everything the
model does not know (dynamics, input disturbances, gain mismatch). The observer extends
the state with ``f`` and estimates ``z = (y, …, y⁽ⁿ⁻¹⁾, f)``; the controller cancels the
estimated ``f`` and leaves a chain of integrators to a plain state-feedback law.

Tuning is by two bandwidths: every observer pole sits at ``−omega_o`` and every
controller pole at ``−omega_c``. A common start is ``omega_o`` 5–10 times ``omega_c``.
"""

from __future__ import annotations

from .._exceptions import ConfigurationError
from .._validation import require_finite, require_limits, require_positive

__all__ = ["LADRC", "LinearESO"]


def _require_order(order: int) -> int:
    if isinstance(order, bool) or order not in (1, 2):
        raise ConfigurationError("order", order, "must be 1 or 2")
    return order


class LinearESO:
    """Linear extended state observer of order 1 or 2, forward-Euler discretised.

    Observer gains come from placing all ``order + 1`` poles at ``−omega_o``:
    first order ``β = (2ωo, ωo²)``, second order ``β = (3ωo, 3ωo², ωo³)``.

    Call :meth:`update` once per sample with the measurement just taken and the control
    that was actually applied over the last interval (after saturation: feeding the
    unsaturated value makes the observer credit the plant with force it never got).
    The first update only seeds ``z1`` with the measurement, so the estimate does not
    start with a step error of ``y``; later updates integrate one step of length ``h``.

    Euler maps every pole ``−ωo`` to ``1 − ωo·h``, so ``ωo·h`` must stay below 2 or the
    observer diverges; that is checked here rather than discovered in a simulation.
    """

    def __init__(self, order: int, b0: float, omega_o: float, h: float) -> None:
        self.order = _require_order(order)
        self.b0 = require_positive("b0", b0)
        self.omega_o = require_positive("omega_o", omega_o)
        self.h = require_positive("h", h)
        if self.omega_o * self.h >= 2.0:
            raise ConfigurationError(
                "omega_o",
                omega_o,
                f"omega_o*h = {self.omega_o * self.h:g} must be < 2 for the Euler-discretised "
                "observer to be stable; lower omega_o or h",
            )
        wo = self.omega_o
        self.gains: tuple[float, ...] = (
            (2.0 * wo, wo * wo) if order == 1 else (3.0 * wo, 3.0 * wo * wo, wo**3)
        )
        self._z = [0.0] * (order + 1)
        self._started = False

    @property
    def z(self) -> tuple[float, ...]:
        """The state estimate ``(ŷ, [ŷ'], f̂)``."""
        return tuple(self._z)

    @property
    def f_est(self) -> float:
        """The estimated total disturbance ``f̂`` (the last component of ``z``)."""
        return self._z[-1]

    @property
    def disturbance(self) -> float:
        """Alias of :attr:`f_est`."""
        return self._z[-1]

    @property
    def started(self) -> bool:
        """Whether the observer has seen a measurement since construction or reset."""
        return self._started

    def reset(self) -> None:
        """Forget the state; the next update seeds the estimate from its measurement."""
        self._z = [0.0] * (self.order + 1)
        self._started = False

    def update(self, measurement: float, control: float) -> tuple[float, ...]:
        """Advance one sample and return the new state estimate ``z``."""
        y = require_finite("measurement", measurement)
        u = require_finite("control", control)
        z = self._z
        if not self._started:
            z[0] = y
            self._started = True
            return tuple(z)
        h = self.h
        e = y - z[0]
        bu = self.b0 * u
        if self.order == 1:
            b1, b2 = self.gains
            z0 = z[0] + h * (z[1] + bu + b1 * e)
            z1 = z[1] + h * (b2 * e)
            self._z = [z0, z1]
        else:
            b1, b2, b3 = self.gains
            z0 = z[0] + h * (z[1] + b1 * e)
            z1 = z[1] + h * (z[2] + bu + b2 * e)
            z2 = z[2] + h * (b3 * e)
            self._z = [z0, z1, z2]
        return tuple(self._z)

    def __repr__(self) -> str:
        return (
            f"LinearESO(order={self.order}, b0={self.b0!r}, omega_o={self.omega_o!r}, h={self.h!r})"
        )


class LADRC:
    """Linear active disturbance rejection controller of order 1 or 2 (Gao 2003).

    ``ladrc(reference, measurement) -> u``. Each call updates the observer with the
    measurement and the control applied since the previous call, then computes

    * first order: ``u0 = kp·(r − z1)`` with ``kp = ωc``;
    * second order: ``u0 = kp·(r − z1) − kd·z2`` with ``kp = ωc²``, ``kd = 2ωc``;

    and ``u = (u0 − f̂) / b0``, clipped to ``output_limits``. The clipped value is what the
    observer is fed next time. With the disturbance cancelled, the reference response
    is that of ``omega_c`` poles: first order ``1/(s/ωc + 1)``, second order a critically
    damped ``ωc²/(s + ωc)²``, hence no overshoot by design.

    ``h`` is the fixed sample time; call exactly once per sample.
    """

    def __init__(
        self,
        order: int,
        b0: float,
        omega_c: float,
        omega_o: float,
        h: float,
        output_limits: tuple[float | None, float | None] = (None, None),
    ) -> None:
        self.eso = LinearESO(order, b0, omega_o, h)
        self.order = self.eso.order
        self.b0 = self.eso.b0
        self.h = self.eso.h
        self.omega_c = require_positive("omega_c", omega_c)
        self.omega_o = self.eso.omega_o
        self.output_limits = require_limits("output_limits", output_limits)
        wc = self.omega_c
        self.kp = wc if order == 1 else wc * wc
        self.kd = 0.0 if order == 1 else 2.0 * wc
        self._last_output = 0.0

    @property
    def f_est(self) -> float:
        """The observer's estimate of the total disturbance ``f``."""
        return self.eso.f_est

    @property
    def disturbance(self) -> float:
        """Alias of :attr:`f_est`."""
        return self.eso.f_est

    @property
    def last_output(self) -> float:
        """The (clipped) control returned by the last call; 0.0 before the first."""
        return self._last_output

    def reset(self) -> None:
        """Back to the state of a new controller: the next call behaves like the first."""
        self.eso.reset()
        self._last_output = 0.0

    def __call__(self, reference: float, measurement: float) -> float:
        r = require_finite("reference", reference)
        z = self.eso.update(measurement, self._last_output)
        u0 = self.kp * (r - z[0])
        if self.order == 2:
            u0 -= self.kd * z[1]
        u = (u0 - z[-1]) / self.b0
        lower, upper = self.output_limits
        if upper is not None and u > upper:
            u = upper
        if lower is not None and u < lower:
            u = lower
        self._last_output = u
        return u

    def __repr__(self) -> str:
        return (
            f"LADRC(order={self.order}, b0={self.b0!r}, omega_c={self.omega_c!r}, "
            f"omega_o={self.omega_o!r}, h={self.h!r}, output_limits={self.output_limits!r})"
        )
