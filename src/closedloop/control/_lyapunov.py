"""A Lyapunov-style monitor for iterative refinement: when to stop (Lyapunov's direct method).

Each round's score gives ``V = ½·(target − score)²``, the "dissatisfaction"; ``ΔV < 0``
means the loop is improving. Rather than "stop after N rounds without improvement",
the monitor stops after ``patience`` consecutive increases of ``V`` and remembers the
best round so the caller can return it instead of the last one.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from .._validation import require_finite, require_int_at_least, require_non_negative

__all__ = ["LyapunovMonitor", "LyapunovVerdict", "Trajectory"]


class Trajectory(StrEnum):
    """How ``V`` has been moving lately; see :class:`LyapunovMonitor` for the rules."""

    CONVERGED = "converged"
    CONVERGING = "converging"
    STALLING = "stalling"
    OSCILLATING = "oscillating"
    DIVERGING = "diverging"


@dataclass(frozen=True, slots=True)
class LyapunovVerdict:
    """The monitor's reading after one round (rounds count from 1).

    ``dV`` is None on the first round. ``increased`` is ``dV > 0``; ``should_stop`` is
    True once ``patience`` consecutive rounds have increased ``V``. ``trajectory`` is
    None on the first round, when there is no movement to classify yet.
    """

    round: int
    score: float
    V: float
    dV: float | None
    increased: bool
    consecutive_increases: int
    should_stop: bool
    trajectory: Trajectory | None
    best_round: int
    best_V: float


class LyapunovMonitor:
    """Watches ``V = ½·(target − score)²`` round by round.

    ``observe(score, payload=None) -> LyapunovVerdict``. The payload (say, the output
    that earned the score) is kept for the best round so far, the one with the lowest
    ``V`` (the earliest on ties): :attr:`best_payload`.

    Trajectory rules, evaluated in this order over the last ``window`` values of ``ΔV``
    (with ``ρ = −ΣΔV / Σ|ΔV|``, the net share of movement that went downhill):

    1. **converged**: the score is within ``tolerance`` of the target.
    2. **stalling**: ``Σ|ΔV| ≤ stall_tolerance``; nothing is moving.
    3. **diverging**: ``patience`` consecutive increases (the stop rule), or ``ρ ≤ −½``.
    4. **converging**: ``ρ ≥ ½``; mostly downhill, small setbacks allowed.
    5. **oscillating**: at least two sign changes of ``ΔV``; up and down, no net direction.
    6. **stalling**: otherwise; movement that cancels out without alternating.

    ``ΔV`` values with ``|ΔV| ≤ stall_tolerance`` are ignored when counting sign changes.
    """

    def __init__(
        self,
        target: float = 1.0,
        patience: int = 2,
        *,
        window: int = 4,
        tolerance: float = 1e-3,
        stall_tolerance: float = 1e-6,
    ) -> None:
        self.target = require_finite("target", target)
        self.patience = require_int_at_least("patience", patience, 1)
        self.window = require_int_at_least("window", window, 2)
        self.tolerance = require_non_negative("tolerance", tolerance)
        self.stall_tolerance = require_non_negative("stall_tolerance", stall_tolerance)
        self.reset()

    def reset(self) -> None:
        """Forget every round."""
        self._values: list[float] = []
        self._deltas: list[float] = []
        self._consecutive = 0
        self._best_round = 0
        self._best_V = float("inf")
        self._best_payload: Any = None
        self._last: LyapunovVerdict | None = None

    @property
    def rounds(self) -> int:
        """Rounds observed so far."""
        return len(self._values)

    @property
    def values(self) -> tuple[float, ...]:
        """``V`` of every round, oldest first."""
        return tuple(self._values)

    @property
    def deltas(self) -> tuple[float, ...]:
        """``ΔV`` of every round after the first."""
        return tuple(self._deltas)

    @property
    def best_round(self) -> int:
        """The round (from 1) with the lowest ``V``; 0 before any round."""
        return self._best_round

    @property
    def best_V(self) -> float:
        """The lowest ``V`` seen (infinity before any round)."""
        return self._best_V

    @property
    def best_payload(self) -> Any:
        """The payload given with the best round."""
        return self._best_payload

    @property
    def last(self) -> LyapunovVerdict | None:
        """The latest verdict."""
        return self._last

    def observe(self, score: float, payload: Any = None) -> LyapunovVerdict:
        """Record one round's score and return the verdict."""
        s = require_finite("score", score)
        err = self.target - s
        v = 0.5 * err * err
        dv: float | None = None
        if self._values:
            dv = v - self._values[-1]
            self._deltas.append(dv)
        self._values.append(v)
        increased = dv is not None and dv > 0.0
        self._consecutive = self._consecutive + 1 if increased else 0
        if v < self._best_V:
            self._best_V = v
            self._best_round = len(self._values)
            self._best_payload = payload
        verdict = LyapunovVerdict(
            round=len(self._values),
            score=s,
            V=v,
            dV=dv,
            increased=increased,
            consecutive_increases=self._consecutive,
            should_stop=self._consecutive >= self.patience,
            trajectory=self._classify(abs(err)) if self._deltas else None,
            best_round=self._best_round,
            best_V=self._best_V,
        )
        self._last = verdict
        return verdict

    def _classify(self, distance: float) -> Trajectory:
        if distance <= self.tolerance:
            return Trajectory.CONVERGED
        recent = self._deltas[-self.window :]
        movement = sum(abs(d) for d in recent)
        if movement <= self.stall_tolerance:
            return Trajectory.STALLING
        rho = -sum(recent) / movement
        if self._consecutive >= self.patience or rho <= -0.5:
            return Trajectory.DIVERGING
        if rho >= 0.5:
            return Trajectory.CONVERGING
        signs = [d > 0 for d in recent if abs(d) > self.stall_tolerance]
        changes = sum(1 for x, y in itertools.pairwise(signs) if x != y)
        if changes >= 2:
            return Trajectory.OSCILLATING
        return Trajectory.STALLING

    def __repr__(self) -> str:
        return (
            f"LyapunovMonitor(target={self.target!r}, patience={self.patience}, "
            f"rounds={self.rounds}, best_round={self._best_round})"
        )
