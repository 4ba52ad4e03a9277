"""From a disturbance estimate to a defence protocol: a graded reaction to ADRC's ``f_est``.

Four levels, each a stronger reaction to a larger estimated total disturbance ``f_est``:
``normal``; ``dual_verification`` (check key steps twice); ``dimension_reduction``
(drop non-essential steps, deliver the core); ``manual_handover`` (freeze and ask a
human). The default boundaries are 0.4, 0.6 and 0.8.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Any

from .._exceptions import ConfigurationError
from .._validation import require_finite, require_unit_interval

__all__ = ["Protocol", "ProtocolSelector", "select_protocol"]

DEFAULT_PROTOCOL_THRESHOLDS: tuple[float, float, float] = (0.4, 0.6, 0.8)


class Protocol(StrEnum):
    """Defence levels in increasing order of severity; :attr:`level` is 0–3."""

    NORMAL = "normal"
    DUAL_VERIFICATION = "dual_verification"
    DIMENSION_REDUCTION = "dimension_reduction"
    MANUAL_HANDOVER = "manual_handover"

    @property
    def level(self) -> int:
        """0 for NORMAL up to 3 for MANUAL_HANDOVER."""
        return _ORDER.index(self)


_ORDER: tuple[Protocol, ...] = tuple(Protocol)


def _require_thresholds(thresholds: Sequence[float]) -> tuple[float, float, float]:
    try:
        values = tuple(thresholds)
    except TypeError:
        raise ConfigurationError("thresholds", thresholds, "must be three numbers") from None
    if len(values) != 3:
        raise ConfigurationError(
            "thresholds", thresholds, "must hold exactly three boundaries (four levels)"
        )
    checked = tuple(require_unit_interval(f"thresholds[{i}]", t) for i, t in enumerate(values))
    if not checked[0] < checked[1] < checked[2]:
        raise ConfigurationError("thresholds", thresholds, "must be strictly increasing")
    return checked[0], checked[1], checked[2]


def _level(f_est: float, thresholds: Sequence[float]) -> int:
    return sum(1 for t in thresholds if f_est >= t)


def select_protocol(
    f_est: float, thresholds: Sequence[float] = DEFAULT_PROTOCOL_THRESHOLDS
) -> Protocol:
    """The protocol for ``f_est``: the number of thresholds it reaches picks the level.

    A value exactly on a boundary takes the higher level (``0.6`` → DIMENSION_REDUCTION).
    """
    f = require_finite("f_est", f_est)
    return _ORDER[_level(f, _require_thresholds(thresholds))]


class ProtocolSelector:
    """Stateful :func:`select_protocol` with a hysteresis band against flapping.

    The level rises as soon as ``f_est`` reaches a threshold, but only falls back once
    ``f_est`` is below that threshold minus ``hysteresis``. With ``hysteresis=0`` this is
    exactly :func:`select_protocol`.
    """

    def __init__(
        self,
        thresholds: Sequence[float] = DEFAULT_PROTOCOL_THRESHOLDS,
        hysteresis: float = 0.0,
    ) -> None:
        self.thresholds = _require_thresholds(thresholds)
        self.hysteresis = require_unit_interval("hysteresis", hysteresis)
        self._lowered = tuple(t - self.hysteresis for t in self.thresholds)
        self._level = 0

    @property
    def protocol(self) -> Protocol:
        """The protocol in force (NORMAL before the first selection)."""
        return _ORDER[self._level]

    def reset(self) -> None:
        """Back to NORMAL."""
        self._level = 0

    def select(self, f_est: float) -> Protocol:
        """Update the level with a new estimate and return the protocol now in force."""
        f = require_finite("f_est", f_est)
        raised = _level(f, self.thresholds)
        if raised >= self._level:
            self._level = raised
        else:
            self._level = min(self._level, _level(f, self._lowered))
        return _ORDER[self._level]

    def state(self) -> dict[str, Any]:
        """A JSON-ready snapshot (thresholds, hysteresis, level); :meth:`from_state` inverts it."""
        return {
            "thresholds": list(self.thresholds),
            "hysteresis": self.hysteresis,
            "level": self._level,
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> ProtocolSelector:
        """Rebuild a selector from :meth:`state`, at the level it had reached."""
        try:
            selector = cls(state["thresholds"], state["hysteresis"])
            level = state["level"]
        except (KeyError, TypeError):
            raise ConfigurationError(
                "state", state, "must be a mapping with thresholds, hysteresis and level"
            ) from None
        if not isinstance(level, int) or isinstance(level, bool) or not 0 <= level < len(_ORDER):
            raise ConfigurationError(
                "state['level']", level, f"must be an int in [0, {len(_ORDER)})"
            )
        selector._level = level
        return selector

    def __repr__(self) -> str:
        return (
            f"ProtocolSelector(thresholds={self.thresholds!r}, hysteresis={self.hysteresis!r}, "
            f"protocol={self.protocol.value!r})"
        )
