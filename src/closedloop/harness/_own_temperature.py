"""An optional sampling temperature of a strategy's or policy's own, and its name suffix.

Blind retry and resample-until-pass both take one: validated when set, and shown in the
name as ``base@T``, the form their specs are parsed from.
"""

from __future__ import annotations

from dataclasses import dataclass

from .._validation import require_temperature

__all__ = ["OwnTemperature"]


@dataclass(frozen=True, slots=True)
class OwnTemperature:
    """A ``temperature`` to sample at instead of the generator's (None: the generator's)."""

    temperature: float | None = None

    def __post_init__(self) -> None:
        if self.temperature is not None:
            require_temperature("temperature", self.temperature)

    def _named(self, base: str) -> str:
        """``base``, with ``@T`` when a temperature of its own is set."""
        return base if self.temperature is None else f"{base}@{self.temperature:g}"
