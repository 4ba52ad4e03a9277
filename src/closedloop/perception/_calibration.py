"""A confidence made calibrated: isotonic regression of outcomes on a sensor's score.

A sensor can rank proposals well (a high AUROC) and still be miscalibrated: decision-token
probabilities of a small model read 0.5 where its calls are right one time in twenty.
Isotonic regression (pool-adjacent-violators; Zadrozny and Elkan, KDD 2002) fits the
non-decreasing step function from score to the observed rate of right answers, so a
threshold on the calibrated value means what it says. The fit keeps the ranking (it is
monotone), so AUROC is unchanged up to ties. Fit it on a development set, never on the
outcomes it will be judged on.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._exceptions import ConfigurationError

__all__ = ["IsotonicCalibration"]


@dataclass(frozen=True, slots=True)
class IsotonicCalibration:
    """A fitted non-decreasing map from a score to a probability of being right.

    ``edges`` are the upper ends of the fitted blocks' scores and ``values`` their rates;
    a score maps to the value of the first block whose edge reaches it (the last block
    beyond every edge).
    """

    edges: tuple[float, ...]
    values: tuple[float, ...]

    def __post_init__(self) -> None:
        if not self.edges or len(self.edges) != len(self.values):
            raise ConfigurationError("edges", self.edges, "need one value per edge, >= 1")
        if list(self.edges) != sorted(self.edges) or list(self.values) != sorted(self.values):
            raise ConfigurationError("values", self.values, "must be non-decreasing in the score")

    @classmethod
    def fit(cls, scores: Sequence[float], right: Sequence[bool]) -> IsotonicCalibration:
        """Pool adjacent violators over the (score, right) pairs sorted by score."""
        if len(scores) != len(right) or not scores:
            raise ConfigurationError("right", len(right), f"need one per score ({len(scores)})")
        if any(not math.isfinite(s) for s in scores):
            raise ConfigurationError("scores", list(scores), "must all be finite")
        pairs = sorted(zip(scores, right, strict=True), key=lambda p: p[0])
        blocks: list[list[float]] = []  # [sum of right, count, largest score]
        for score, ok in pairs:
            blocks.append([float(ok), 1.0, score])
            while len(blocks) > 1 and _rate(blocks[-2]) >= _rate(blocks[-1]):
                top = blocks.pop()
                blocks[-1] = [blocks[-1][0] + top[0], blocks[-1][1] + top[1], top[2]]
        return cls(tuple(b[2] for b in blocks), tuple(_rate(b) for b in blocks))

    def __call__(self, score: float) -> float:
        """The calibrated probability of a proposal with this score being right."""
        i = bisect.bisect_left(self.edges, score)
        return self.values[min(i, len(self.values) - 1)]

    def state(self) -> dict[str, Any]:
        """The fit as a plain JSON-ready dict."""
        return {"edges": list(self.edges), "values": list(self.values)}

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> IsotonicCalibration:
        """Rebuild from ``state()``; a missing or bad field is an error."""
        try:
            return cls(tuple(map(float, state["edges"])), tuple(map(float, state["values"])))
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigurationError("state", dict(state), f"is not a fit: {exc}") from None


def _rate(block: list[float]) -> float:
    return block[0] / block[1]
