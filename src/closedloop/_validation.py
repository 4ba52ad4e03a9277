"""Argument checks shared by every layer; each error names the argument and its value."""

from __future__ import annotations

import math

from ._exceptions import ConfigurationError

__all__ = [
    "require_finite",
    "require_int_at_least",
    "require_limits",
    "require_non_negative",
    "require_positive",
    "require_temperature",
    "require_unit_interval",
]


def require_finite(name: str, value: float) -> float:
    """Return ``value`` as a float, or raise if it is NaN, infinite or not a number."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigurationError(name, value, "must be a real number")
    if not math.isfinite(value):
        raise ConfigurationError(name, value, "must be finite (not NaN or infinite)")
    return float(value)


def require_positive(name: str, value: float) -> float:
    value = require_finite(name, value)
    if value <= 0.0:
        raise ConfigurationError(name, value, "must be > 0")
    return value


def require_non_negative(name: str, value: float) -> float:
    value = require_finite(name, value)
    if value < 0.0:
        raise ConfigurationError(name, value, "must be >= 0")
    return value


def require_unit_interval(name: str, value: float) -> float:
    value = require_finite(name, value)
    if not 0.0 <= value <= 1.0:
        raise ConfigurationError(name, value, "must lie in [0, 1]")
    return value


def require_temperature(name: str, value: float) -> float:
    """A sampling temperature: a real number in [0, 2] (NaN is outside it)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 2.0:
        raise ConfigurationError(name, value, "must lie in [0, 2]")
    return float(value)


def require_int_at_least(name: str, value: int, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigurationError(name, value, "must be an integer")
    if value < minimum:
        raise ConfigurationError(name, value, f"must be >= {minimum}")
    return value


def require_limits(
    name: str, limits: tuple[float | None, float | None]
) -> tuple[float | None, float | None]:
    """Validate a (lower, upper) pair where either side may be None (unbounded)."""
    try:
        lower, upper = limits
    except (TypeError, ValueError):
        raise ConfigurationError(name, limits, "must be a (lower, upper) pair") from None
    if lower is not None:
        lower = require_finite(f"{name}[0]", lower)
    if upper is not None:
        upper = require_finite(f"{name}[1]", upper)
    if lower is not None and upper is not None and lower > upper:
        raise ConfigurationError(name, limits, "lower limit is above the upper limit")
    return lower, upper
