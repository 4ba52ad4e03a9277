"""What a decision reads and what it proposes: the state vector, the context, a proposal.

The hybrid controller builds a :class:`DecisionContext` from the latest observations;
rules and the model read it and answer with a :class:`Proposal`. Both sides import these
from here, so the controller and the rules never import each other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from .._exceptions import ConfigurationError
from .._validation import require_unit_interval
from ..perception import Observation, ObservationStatus

__all__ = ["DecisionContext", "Proposal", "SourceState", "StateVector", "Trigger"]


@dataclass(frozen=True, slots=True)
class Proposal:
    """A suggested move: the action, how sure its author is, why, and its parameters."""

    action: str
    confidence: float
    reason: str
    params: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.action, str) or not self.action:
            raise ConfigurationError("action", self.action, "must be a non-empty string")
        require_unit_interval("confidence", self.confidence)
        object.__setattr__(self, "params", MappingProxyType(dict(self.params)))


@dataclass(frozen=True, slots=True)
class Trigger:
    """Why a rule is consulted: the cause key and the source it came from (if any)."""

    cause: str
    source: SourceState | None = None


@dataclass(frozen=True, slots=True)
class SourceState:
    """One source's entry in the state vector."""

    source: str
    confidence: float
    status: ObservationStatus
    age_s: float
    weight: float
    retry_after_s: float | None = None
    error: str | None = None
    causes: tuple[str, ...] = ()

    @property
    def error_share(self) -> float:
        """How much this source adds to the unnormalised error: ``weight * (1 - c)``."""
        return self.weight * (1.0 - self.confidence)


@dataclass(frozen=True, slots=True)
class StateVector:
    """The latest observation of every source, reduced to numbers the controller uses."""

    sources: Mapping[str, SourceState]
    now: float

    def weighted_confidence(self) -> float:
        """Σ wᵢcᵢ / Σ wᵢ; 0 with no weighted source (nothing known is nothing trusted)."""
        total = sum(s.weight for s in self.sources.values())
        if total <= 0.0:
            return 0.0
        return sum(s.weight * s.confidence for s in self.sources.values()) / total

    def confidence_error(self) -> float:
        """``1 - weighted confidence``, in [0, 1]."""
        return min(1.0, max(0.0, 1.0 - self.weighted_confidence()))


@dataclass(frozen=True, slots=True)
class DecisionContext:
    """What rules, thresholds and the model see for one decision."""

    state: StateVector
    observations: Mapping[str, Observation]
    context: Mapping[str, Any]
    error: float
    tolerance: float
    proposals: tuple[tuple[str, Proposal], ...] = ()
