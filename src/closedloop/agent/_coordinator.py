"""Distributed control: a coordinator over sub-agents, one ESO per sub-agent.

Each sub-agent runs its own loop and PID and reports, after each of its steps, the
control effort it applied and the quality it got. The coordinator runs one regression
ESO per sub-agent over those reports and turns each estimate into a decision for that
sub-agent with a hysteresis selector: ``normal``, ``dual_verification`` (check its
readings twice), ``reduced_scope`` (drop what is not essential) or ``handover`` (take its
work away). :meth:`Coordinator.replan` moves the roles of a handed-over sub-agent to
the healthiest sub-agent still at ``normal``; a role nobody can take is a handover of the
task to a person.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from .._exceptions import ConfigurationError
from .._validation import require_int_at_least, require_unit_interval
from ..control import Protocol, ProtocolSelector, RegressionESO

__all__ = ["Coordinator", "CoordinatorDecision", "SubAgentReport"]


class CoordinatorDecision(StrEnum):
    """What the coordinator tells one sub-agent to do (mildest first)."""

    NORMAL = "normal"
    DUAL_VERIFICATION = "dual_verification"
    REDUCED_SCOPE = "reduced_scope"
    HANDOVER = "handover"


_FROM_PROTOCOL = {
    Protocol.NORMAL: CoordinatorDecision.NORMAL,
    Protocol.DUAL_VERIFICATION: CoordinatorDecision.DUAL_VERIFICATION,
    Protocol.DIMENSION_REDUCTION: CoordinatorDecision.REDUCED_SCOPE,
    Protocol.MANUAL_HANDOVER: CoordinatorDecision.HANDOVER,
}


@dataclass(frozen=True, slots=True)
class SubAgentReport:
    """One step of one sub-agent: the effort it applied (its PID's u) and the quality."""

    name: str
    control: float
    quality: float


class Coordinator:
    """One ESO and one protocol selector per sub-agent; decisions and re-planning.

    ``min_samples`` is small on purpose: a sub-agent's run is a few steps, and a decision
    that comes after the sub-agent finished is no decision. ``setpoint`` is the quality
    every sub-agent is held to.
    """

    def __init__(
        self,
        names: Sequence[str],
        *,
        window: int = 8,
        min_samples: int = 2,
        thresholds: tuple[float, float, float] = (0.4, 0.6, 0.8),
        hysteresis: float = 0.05,
        setpoint: float = 1.0,
    ) -> None:
        if not names or len(set(names)) != len(names):
            raise ConfigurationError("names", list(names), "name distinct sub-agents")
        require_int_at_least("min_samples", min_samples, 1)
        require_int_at_least("window", window, min_samples)
        self.setpoint = require_unit_interval("setpoint", setpoint)
        self.names = tuple(names)
        self._eso = {n: RegressionESO(window=window, min_samples=min_samples) for n in names}
        self._selector = {n: ProtocolSelector(thresholds, hysteresis) for n in names}
        self.history: list[tuple[str, float, CoordinatorDecision]] = []

    def _known(self, name: str) -> str:
        if name not in self._eso:
            raise ConfigurationError("name", name, f"known: {', '.join(self.names)}")
        return name

    def observe(self, report: SubAgentReport) -> CoordinatorDecision:
        """Take one step's report; returns that sub-agent's decision from now on."""
        name = self._known(report.name)
        q = min(1.0, max(0.0, report.quality))
        f_est = self._eso[name].update(report.control, self.setpoint, q)
        decision = _FROM_PROTOCOL[self._selector[name].select(f_est)]
        self.history.append((name, f_est, decision))
        return decision

    def f_est(self, name: str) -> float:
        """The sub-agent's current disturbance estimate."""
        return self._eso[self._known(name)].f_est

    def decision(self, name: str) -> CoordinatorDecision:
        """What the coordinator currently decides for the sub-agent ``name``."""
        return _FROM_PROTOCOL[self._selector[self._known(name)].protocol]

    def decisions(self) -> dict[str, CoordinatorDecision]:
        """The current decision for every known sub-agent."""
        return {n: self.decision(n) for n in self.names}

    def replan(self, roles: Mapping[str, str]) -> dict[str, str | None]:
        """``role -> sub-agent`` after moving work off handed-over sub-agents.

        A role whose sub-agent is at ``handover`` goes to the sub-agent at ``normal`` with
        the lowest f_est (ties: the order of ``names``); None when there is none (a person
        must take it).
        """
        healthy = sorted(
            (n for n in self.names if self.decision(n) is CoordinatorDecision.NORMAL),
            key=lambda n: (self.f_est(n), self.names.index(n)),
        )
        out: dict[str, str | None] = {}
        for role, owner in roles.items():
            self._known(owner)
            if self.decision(owner) is not CoordinatorDecision.HANDOVER:
                out[role] = owner
            else:
                out[role] = healthy[0] if healthy else None
        return out

    def reset(self, name: str) -> None:
        """A sub-agent starts afresh (after its work was re-planned or a person helped)."""
        self._eso[self._known(name)].reset()
        self._selector[name].reset()
