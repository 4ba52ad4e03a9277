"""Conformal control of the rejection level: the threshold as a quantile of recent scores.

Adaptive conformal inference in its original form (Gibbs and Candes, NeurIPS 2021) does
not move a threshold on the score's own scale: it moves a *level* and reads the
threshold off the empirical quantile of recent scores at that level. Here the level is
the share of proposals to reject, l in [0, l_max]; the threshold is the l-quantile of
the last ``window`` confidences seen (every proposal's, accepted or not, since the
confidence is read before anything runs), and the level is set by the same conformal PID
as :class:`ConformalPID` from the outcomes of accepted calls.

Two things follow that a threshold on the raw scale lacks. A step of the controller
changes coverage by the same amount wherever the scores crowd (a model's confidences
cluster near 1, where a raw step of 0.05 may reject nothing or nearly everything). And
with ``max_level`` < 1 the surest ``1 - max_level`` of proposals are always accepted, so
feedback never stops: a threshold on the raw scale that climbs past the largest score
accepts nothing, hears nothing more and stays there after the model recovers.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from typing import Any

from .._exceptions import ConfigurationError
from .._validation import require_unit_interval
from ._risk import ConformalPID, _require_keys

__all__ = ["QuantileThreshold"]


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


class QuantileThreshold:
    """Holds the error rate of accepted calls at ``alpha`` by moving the share of
    proposals rejected; the threshold is that quantile of the last ``window``
    confidences passed to :meth:`observe`.

    ``observe(confidence)`` records every proposal's confidence (after its decision, so
    a threshold never depends on the score it judges); ``update(err)`` takes an accepted
    call's outcome (True: it was wrong). Before any confidence is seen the threshold is
    0: everything is accepted until there is a distribution to take a quantile of.
    """

    __slots__ = ("_level", "_scores", "_window")

    def __init__(
        self,
        alpha: float,
        kp: float = 0.0,
        ki: float = 0.05,
        kd: float = 0.0,
        *,
        start: float = 0.5,
        max_level: float = 0.95,
        window: int = 200,
    ) -> None:
        max_level = require_unit_interval("max_level", max_level)
        if max_level >= 1.0:
            raise ConfigurationError(
                "max_level", max_level, "must be below 1 so that some calls are accepted"
            )
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise ConfigurationError("window", window, "must be a positive integer")
        self._level = ConformalPID(alpha, kp, ki, kd, start=start, limits=(0.0, max_level))
        self._window = window
        self._scores: deque[float] = deque(maxlen=window)

    @property
    def level(self) -> float:
        """The share of proposals rejected now."""
        return self._level.threshold

    @property
    def threshold(self) -> float:
        """The confidence a call needs now: the level's quantile of recent confidences."""
        if not self._scores:
            return 0.0
        return _quantile(list(self._scores), self._level.threshold)

    @property
    def alpha(self) -> float:
        """The target error rate of accepted calls."""
        return self._level.alpha

    @property
    def steps(self) -> int:
        """How many outcomes of accepted calls the controller has seen."""
        return self._level.steps

    @property
    def realised_error(self) -> float | None:
        """The error rate of the accepted calls seen so far (None before any)."""
        return self._level.realised_error

    def accepts(self, confidence: float) -> bool:
        """Whether a call with this confidence is accepted now."""
        return require_unit_interval("confidence", confidence) >= self.threshold

    def observe(self, confidence: float) -> None:
        """Record one proposal's confidence (accepted or not) in the window."""
        self._scores.append(require_unit_interval("confidence", confidence))

    def update(self, err: bool) -> float:
        """Feed one accepted call's outcome (True: it was wrong); return the threshold."""
        self._level.update(err)
        return self.threshold

    def state(self) -> dict[str, Any]:
        """Settings and state as a plain JSON-ready dict."""
        return {"level": self._level.state(), "window": self._window, "scores": list(self._scores)}

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> QuantileThreshold:
        """Rebuild from ``state()``; a missing or bad field is an error."""
        _require_keys(state, ("level", "window", "scores"))
        level = ConformalPID.from_state(state["level"])
        out = cls(
            level.alpha,
            max_level=level.state()["upper"],
            window=state["window"],
        )
        out._level = level
        scores = state["scores"]
        if not isinstance(scores, list):
            raise ConfigurationError("scores", scores, "must be a list of confidences")
        for score in scores[-out._window :]:
            out.observe(score)
        return out

    def __repr__(self) -> str:
        return (
            f"QuantileThreshold(alpha={self.alpha}, level={self.level:.4f}, "
            f"threshold={self.threshold:.4f}, seen={len(self._scores)})"
        )
