"""From a disturbance estimate to a defence protocol: a graded reaction to ADRC's ``f_est``.

Four levels, each a stronger reaction to a larger estimated total disturbance ``f_est``:
``normal``; ``dual_verification`` (check key steps twice); ``dimension_reduction``
(drop non-essential steps, deliver the core); ``manual_handover`` (freeze and ask a
human). The default boundaries are 0.4, 0.6 and 0.8.

A bare threshold rule flaps when the estimate hovers on a boundary and jumps straight
from ``normal`` to ``manual_handover`` on one large estimate. :class:`ProtocolSelector`
adds the two classic remedies of a switching controller: hysteresis (a level is entered
at its enter threshold and left only below a lower exit threshold) and a minimum dwell
(a level, once entered, is held for a number of selections before the next change, and
each change moves one level), so a defence escalates level by level and each level gets
the steps it needs to show an effect.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Any

from .._exceptions import ConfigurationError
from .._validation import require_finite, require_int_at_least, require_unit_interval

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


def _require_exits(
    exits: Sequence[float], enters: tuple[float, float, float]
) -> tuple[float, float, float]:
    try:
        values = tuple(exits)
    except TypeError:
        raise ConfigurationError("exit_thresholds", exits, "must be three numbers") from None
    if len(values) != 3:
        raise ConfigurationError("exit_thresholds", exits, "must hold exactly three boundaries")
    checked = tuple(require_finite(f"exit_thresholds[{i}]", t) for i, t in enumerate(values))
    if not checked[0] < checked[1] < checked[2]:
        raise ConfigurationError("exit_thresholds", exits, "must be strictly increasing")
    for i, (out, enter) in enumerate(zip(checked, enters, strict=True)):
        if out > enter:
            raise ConfigurationError(
                f"exit_thresholds[{i}]", out, f"must be <= its enter threshold {enter}"
            )
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
    """Stateful :func:`select_protocol` with hysteresis and a minimum dwell against flapping.

    The level rises as soon as ``f_est`` reaches a threshold (its *enter* threshold), but
    only falls back once ``f_est`` is below that level's *exit* threshold:
    ``exit_thresholds`` when given, else each threshold minus ``hysteresis``.

    ``min_dwell`` (selections, 0 by default) adds a dwell time: from 1 on, one selection
    moves at most one level up or down, and a level entered is held for at least
    ``min_dwell`` selections before it changes again. With ``hysteresis=0`` and
    ``min_dwell=0`` this is exactly :func:`select_protocol`.
    """

    def __init__(
        self,
        thresholds: Sequence[float] = DEFAULT_PROTOCOL_THRESHOLDS,
        hysteresis: float = 0.0,
        *,
        exit_thresholds: Sequence[float] | None = None,
        min_dwell: int = 0,
    ) -> None:
        self.thresholds = _require_thresholds(thresholds)
        self.hysteresis = require_unit_interval("hysteresis", hysteresis)
        self.min_dwell = require_int_at_least("min_dwell", min_dwell, 0)
        if exit_thresholds is None:
            self.exit_thresholds = tuple(t - self.hysteresis for t in self.thresholds)
        else:
            if self.hysteresis:
                raise ConfigurationError(
                    "exit_thresholds",
                    exit_thresholds,
                    "give exit_thresholds or hysteresis, not both",
                )
            self.exit_thresholds = _require_exits(exit_thresholds, self.thresholds)
        self._level = 0
        self._since = self.min_dwell  # selections since the last change: free to move at once

    @property
    def protocol(self) -> Protocol:
        """The protocol in force (NORMAL before the first selection)."""
        return _ORDER[self._level]

    def reset(self) -> None:
        """Back to NORMAL."""
        self._level = 0
        self._since = self.min_dwell

    def start(self, f_est: float) -> Protocol:
        """Start at the level ``f_est`` names, at once: for an estimate known before the
        first step (a pre-warmed one), which is a starting point, not a jump. The dwell
        counts from here."""
        f = require_finite("f_est", f_est)
        self._level = _level(f, self.thresholds)
        self._since = 0
        return _ORDER[self._level]

    def select(self, f_est: float) -> Protocol:
        """Update the level with a new estimate and return the protocol now in force."""
        f = require_finite("f_est", f_est)
        raised = _level(f, self.thresholds)
        if raised >= self._level:
            target = raised
        else:
            target = min(self._level, _level(f, self.exit_thresholds))
        self._since += 1
        if self.min_dwell == 0:
            self._level = target
        elif target != self._level and self._since >= self.min_dwell:
            self._level += 1 if target > self._level else -1
            self._since = 0
        return _ORDER[self._level]

    def state(self) -> dict[str, Any]:
        """A JSON-ready snapshot (thresholds, hysteresis, dwell, level); :meth:`from_state`
        inverts it."""
        out: dict[str, Any] = {
            "thresholds": list(self.thresholds),
            "hysteresis": self.hysteresis,
            "level": self._level,
        }
        if self.min_dwell or self.exit_thresholds != tuple(
            t - self.hysteresis for t in self.thresholds
        ):
            out.update(
                exit_thresholds=list(self.exit_thresholds),
                min_dwell=self.min_dwell,
                since=self._since,
            )
        return out

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> ProtocolSelector:
        """Rebuild a selector from :meth:`state`, at the level it had reached."""
        try:
            hysteresis = state["hysteresis"]
            exits = state.get("exit_thresholds")
            selector = cls(
                state["thresholds"],
                hysteresis if exits is None else 0.0,
                exit_thresholds=exits,
                min_dwell=state.get("min_dwell", 0),
            )
            level = state["level"]
            since = state.get("since", selector.min_dwell)
        except (KeyError, TypeError, AttributeError):
            raise ConfigurationError(
                "state", state, "must be a mapping with thresholds, hysteresis and level"
            ) from None
        if not isinstance(level, int) or isinstance(level, bool) or not 0 <= level < len(_ORDER):
            raise ConfigurationError(
                "state['level']", level, f"must be an int in [0, {len(_ORDER)})"
            )
        selector._level = level
        selector._since = require_int_at_least("state['since']", since, 0)
        return selector

    def __repr__(self) -> str:
        return (
            f"ProtocolSelector(thresholds={self.thresholds!r}, "
            f"exit_thresholds={self.exit_thresholds!r}, min_dwell={self.min_dwell}, "
            f"protocol={self.protocol.value!r})"
        )
