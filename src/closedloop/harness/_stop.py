"""When the refinement loop stops: the policy algebra of :mod:`closedloop.policy` over rounds.

Each policy is a frozen dataclass called as ``policy(state) -> StopDecision | None``; it
reads only the :class:`RefineState` it is given (a :class:`~closedloop.policy.PolicyState`
whose attempt is the round), so it is tested by building a state by hand.
``stop_when_target_met() | stop_on_lyapunov()`` stops at whichever fires first, ``&`` only
when both fire. The refiner's ``max_rounds`` is a backstop on top of any policy. Policy
classes have lowercase names, as tenacity's do, because they read as phrases where they
are used.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeAlias, cast

from .._exceptions import ConfigurationError
from .._policy import AnyOf, Policy
from .._policy_state import PolicyState
from .._validation import require_finite, require_int_at_least
from ..control import LyapunovMonitor, LyapunovVerdict, Trajectory

__all__ = [
    "AnyStop",
    "RefineState",
    "RefineStop",
    "StopDecision",
    "StopReason",
    "stop_after_rounds",
    "stop_on_fixed_point",
    "stop_on_lyapunov",
    "stop_on_trajectory",
    "stop_when_target_met",
]

# Deprecated alias (one release): the algebra's "any" combinator.
AnyStop = AnyOf


class StopReason(StrEnum):
    """Why a refinement run ended; every end is one of these."""

    TARGET_MET = "target_met"
    MAX_ROUNDS = "max_rounds"
    LYAPUNOV = "lyapunov"
    TRAJECTORY = "trajectory"
    FIXED_POINT = "fixed_point"
    EXTERNAL = "external"
    """A policy from outside closedloop (a loopgain monitor, a budget) said stop."""


@dataclass(frozen=True, slots=True)
class StopDecision:
    """A policy's verdict that the loop should stop, and why."""

    reason: StopReason
    detail: str


class RefineState(PolicyState):
    """What a stop policy sees after a round: a :class:`PolicyState` whose attempt is the
    round and whose facts are the scores, the target and the fixed-point finding.

    ``scores`` has one entry per round so far (from round 1), ``None`` for a round that
    was not evaluated (interval feedback). Policies judge on evaluated rounds only.
    ``fixed_point`` is the refiner's finding that the loop stands still: the latest round
    handed back a program an earlier round already wrote, and the next round would get
    the same feedback (text and temperature) that led to it.
    """

    __slots__ = ()

    def __init__(
        self,
        round: int,
        scores: tuple[float | None, ...],
        target: float = 1.0,
        fixed_point: bool = False,
    ) -> None:
        super().__init__(
            attempt=round,
            facts={"scores": tuple(scores), "target": target, "fixed_point": fixed_point},
        )

    @property
    def round(self) -> int:
        return self.attempt

    @property
    def scores(self) -> tuple[float | None, ...]:
        return cast("tuple[float | None, ...]", self.facts.get("scores", ()))

    @property
    def target(self) -> float:
        return cast(float, self.facts.get("target", 1.0))

    @property
    def fixed_point(self) -> bool:
        return bool(self.facts.get("fixed_point", False))

    @property
    def evaluated(self) -> tuple[float, ...]:
        """The scores of the evaluated rounds, in order."""
        return tuple(s for s in self.scores if s is not None)

    @property
    def last_evaluated(self) -> bool:
        """Whether the latest round was evaluated."""
        return bool(self.scores) and self.scores[-1] is not None


RefineStop: TypeAlias = Callable[[RefineState], "StopDecision | None"]
"""What the refiner accepts as ``stop``: a policy (or any callable) giving a decision."""


class _RoundPolicy(Policy[StopDecision]):
    """A policy over a :class:`RefineState` (a plain state is read as round 0)."""

    __slots__ = ()

    def __call__(self, state: PolicyState) -> StopDecision | None:
        return self.judge(state if isinstance(state, RefineState) else _as_refine(state))

    @abstractmethod
    def judge(self, state: RefineState) -> StopDecision | None: ...


def _as_refine(state: PolicyState) -> RefineState:
    facts: dict[str, Any] = dict(state.facts)
    return RefineState(
        state.attempt,
        tuple(facts.get("scores", ())),
        float(facts.get("target", 1.0)),
        bool(facts.get("fixed_point", False)),
    )


@dataclass(frozen=True, slots=True)
class stop_when_target_met(_RoundPolicy):
    """Stop as soon as an evaluated round reaches ``target`` (default: every check passes)."""

    target: float = 1.0

    def __post_init__(self) -> None:
        require_finite("target", self.target)

    def judge(self, state: RefineState) -> StopDecision | None:
        """Stop once the last evaluated score reaches the target; otherwise None."""
        if state.last_evaluated and state.scores[-1] is not None:
            score = state.scores[-1]
            if score >= self.target - 1e-12:
                return StopDecision(
                    StopReason.TARGET_MET, f"round {state.round} scored {score:.3f}"
                )
        return None


@dataclass(frozen=True, slots=True)
class stop_after_rounds(_RoundPolicy):
    """Stop after ``rounds`` rounds."""

    rounds: int

    def __post_init__(self) -> None:
        require_int_at_least("rounds", self.rounds, 1)

    def judge(self, state: RefineState) -> StopDecision | None:
        """Stop once the configured number of rounds has run; otherwise None."""
        if state.round >= self.rounds:
            return StopDecision(StopReason.MAX_ROUNDS, f"{state.round} of {self.rounds} rounds run")
        return None


def _replay(scores: Sequence[float], target: float, patience: int) -> LyapunovVerdict | None:
    monitor = LyapunovMonitor(target=target, patience=patience)
    verdict = None
    for score in scores:
        verdict = monitor.observe(min(score, target))
    return verdict


@dataclass(frozen=True, slots=True)
class stop_on_lyapunov(_RoundPolicy):
    """Stop after ``patience`` consecutive rounds in which ``V = ½(target − score)²`` rose.

    The refiner then returns its best-so-far output, not the last one.
    """

    patience: int = 2

    def __post_init__(self) -> None:
        require_int_at_least("patience", self.patience, 1)

    def judge(self, state: RefineState) -> StopDecision | None:
        """Stop once ``V`` rose ``patience`` rounds in a row; otherwise None."""
        if not state.last_evaluated:
            return None
        verdict = _replay(state.evaluated, state.target, self.patience)
        if verdict is not None and verdict.should_stop:
            return StopDecision(
                StopReason.LYAPUNOV,
                f"V rose in {verdict.consecutive_increases} consecutive evaluated rounds",
            )
        return None


@dataclass(frozen=True, slots=True)
class stop_on_trajectory(_RoundPolicy):
    """Stop when the Lyapunov monitor classifies the trajectory as one of ``classes``.

    Judged only once ``min_evaluated`` rounds have been evaluated, so one early setback
    does not end a run. Default classes: diverging, oscillating and stalling (no net
    progress over the monitor's window), the three in which more rounds rarely pay.
    """

    classes: frozenset[Trajectory] = frozenset(
        {Trajectory.DIVERGING, Trajectory.OSCILLATING, Trajectory.STALLING}
    )
    min_evaluated: int = 3
    patience: int = 2

    def __post_init__(self) -> None:
        classes = frozenset(Trajectory(c) for c in self.classes)
        if not classes:
            raise ConfigurationError("classes", self.classes, "name at least one trajectory")
        object.__setattr__(self, "classes", classes)
        require_int_at_least("min_evaluated", self.min_evaluated, 2)
        require_int_at_least("patience", self.patience, 1)

    def judge(self, state: RefineState) -> StopDecision | None:
        """Stop once the trajectory is one of ``classes``; otherwise None."""
        scores = state.evaluated
        if not state.last_evaluated or len(scores) < self.min_evaluated:
            return None
        verdict = _replay(scores, state.target, self.patience)
        if verdict is not None and verdict.trajectory in self.classes:
            return StopDecision(StopReason.TRAJECTORY, f"trajectory is {verdict.trajectory}")
        return None


@dataclass(frozen=True, slots=True)
class stop_on_fixed_point(_RoundPolicy):
    """Stop when the loop has reached a fixed point (see :class:`RefineState`).

    The generator answered the same feedback with a program it had already written, and
    the strategy would send that same feedback again: the next round could only resample
    an answered prompt. A strategy that reacts to the repeat (PID feedback escalates)
    changes its feedback, so this does not fire for it.
    """

    def judge(self, state: RefineState) -> StopDecision | None:
        """Stop when a round repeated an earlier program under the same feedback; otherwise None."""
        if state.fixed_point:
            return StopDecision(
                StopReason.FIXED_POINT,
                f"round {state.round} repeated an earlier program under the same feedback",
            )
        return None
