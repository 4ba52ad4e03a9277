"""Stop policies: a small language over one :class:`LoopState` snapshot (tenacity style).

``stop_after_steps(12) | stop_after_delay(120) | stop_on_no_progress(3)`` stops when any
part fires; ``&`` stops only when every part fires. Each policy is a frozen dataclass and a
pure function of the snapshot, so a test builds a ``LoopState`` by hand and never sleeps.
A plain callable ``(LoopState) -> bool | HaltReason | None`` is accepted wherever a policy
is; ``True`` from it halts as ``cancelled`` (the caller's own code chose to stop).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

from .._exceptions import ConfigurationError
from .._validation import require_int_at_least, require_non_negative
from ._records import HaltReason

__all__ = [
    "LoopState",
    "StopAll",
    "StopAny",
    "StopPolicy",
    "StopWhen",
    "as_stop_policy",
    "stop_after_delay",
    "stop_after_steps",
    "stop_never",
    "stop_on_budget",
    "stop_on_no_progress",
    "stop_on_repeats",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class LoopState:
    """What every stop policy sees between two steps.

    ``step`` counts the steps taken so far; ``elapsed_s`` is the time since the run
    started (from the injected clock); ``no_progress_steps`` counts consecutive steps that
    produced no new valid information; ``repeat_count`` is how often the latest action
    repeated an earlier one.
    """

    step: int = 0
    elapsed_s: float = 0.0
    tokens: int = 0
    cost: float = 0.0
    model_calls: int = 0
    no_progress_steps: int = 0
    repeat_count: int = 0
    replan_count: int = 0
    last_error: float | None = None
    f_est: float = 0.0
    protocol: str = "normal"
    phase: str = ""


class StopPolicy(ABC):
    """Decides whether the run ends now: ``policy(state) -> HaltReason | None``."""

    __slots__ = ()

    @abstractmethod
    def __call__(self, state: LoopState) -> HaltReason | None: ...

    def __or__(self, other: StopPolicy | StopFn) -> StopAny:
        parts = [
            p
            for s in (self, as_stop_policy(other))
            for p in (s.parts if isinstance(s, StopAny) else (s,))
        ]
        return StopAny(tuple(parts))

    def __ror__(self, other: StopFn) -> StopAny:
        return as_stop_policy(other) | self

    def __and__(self, other: StopPolicy | StopFn) -> StopAll:
        parts = [
            p
            for s in (self, as_stop_policy(other))
            for p in (s.parts if isinstance(s, StopAll) else (s,))
        ]
        return StopAll(tuple(parts))

    def __rand__(self, other: StopFn) -> StopAll:
        return as_stop_policy(other) & self

    def max_delay_s(self) -> float | None:
        """The elapsed time at which this policy surely fires, if it has one.

        The loop uses it to cancel a model or tool call in flight at the deadline instead
        of waiting for the call to return.
        """
        return None


StopFn = Callable[[LoopState], "bool | HaltReason | None"]


@dataclass(frozen=True, slots=True)
class StopAny(StopPolicy):
    """Stops when any part fires; the first part that fires names the reason."""

    parts: tuple[StopPolicy, ...]

    def __call__(self, state: LoopState) -> HaltReason | None:
        for part in self.parts:
            reason = part(state)
            if reason is not None:
                return reason
        return None

    def max_delay_s(self) -> float | None:
        """The earliest deadline among the parts: whichever fires first ends the run."""
        delays = [d for d in (p.max_delay_s() for p in self.parts) if d is not None]
        return min(delays) if delays else None


@dataclass(frozen=True, slots=True)
class StopAll(StopPolicy):
    """Stops only when every part fires; the first part names the reason."""

    parts: tuple[StopPolicy, ...]

    def __call__(self, state: LoopState) -> HaltReason | None:
        reasons = [part(state) for part in self.parts]
        if reasons and all(r is not None for r in reasons):
            return reasons[0]
        return None


@dataclass(frozen=True, slots=True)
class StopWhen(StopPolicy):
    """A plain callable as a policy; ``True`` halts with ``reason``."""

    fn: StopFn
    reason: HaltReason = HaltReason.CANCELLED

    def __call__(self, state: LoopState) -> HaltReason | None:
        verdict = self.fn(state)
        if verdict is None or verdict is False:
            return None
        if verdict is True:
            return self.reason
        if isinstance(verdict, HaltReason):
            return verdict
        raise ConfigurationError(
            "stop", verdict, "a stop callable must return a bool, a HaltReason or None"
        )


@dataclass(frozen=True, slots=True)
class _StopAfterSteps(StopPolicy):
    max_steps: int

    def __post_init__(self) -> None:
        require_int_at_least("max_steps", self.max_steps, 1)

    def __call__(self, state: LoopState) -> HaltReason | None:
        return HaltReason.STEP_LIMIT if state.step >= self.max_steps else None


@dataclass(frozen=True, slots=True)
class _StopAfterDelay(StopPolicy):
    seconds: float

    def __post_init__(self) -> None:
        require_non_negative("seconds", self.seconds)

    def __call__(self, state: LoopState) -> HaltReason | None:
        return HaltReason.DEADLINE if state.elapsed_s >= self.seconds else None

    def max_delay_s(self) -> float | None:
        return self.seconds


@dataclass(frozen=True, slots=True)
class _StopOnNoProgress(StopPolicy):
    steps: int

    def __post_init__(self) -> None:
        require_int_at_least("steps", self.steps, 1)

    def __call__(self, state: LoopState) -> HaltReason | None:
        return HaltReason.NO_PROGRESS if state.no_progress_steps >= self.steps else None


@dataclass(frozen=True, slots=True)
class _StopOnRepeats(StopPolicy):
    repeats: int

    def __post_init__(self) -> None:
        require_int_at_least("repeats", self.repeats, 1)

    def __call__(self, state: LoopState) -> HaltReason | None:
        return HaltReason.REPEATED_ACTION if state.repeat_count >= self.repeats else None


@dataclass(frozen=True, slots=True)
class _StopOnBudget(StopPolicy):
    tokens: int | None = None
    cost: float | None = None

    def __post_init__(self) -> None:
        if self.tokens is None and self.cost is None:
            raise ConfigurationError("stop_on_budget", None, "give tokens=, cost= or both")
        if self.tokens is not None:
            require_int_at_least("tokens", self.tokens, 1)
        if self.cost is not None:
            require_non_negative("cost", self.cost)

    def __call__(self, state: LoopState) -> HaltReason | None:
        if self.tokens is not None and state.tokens >= self.tokens:
            return HaltReason.BUDGET
        if self.cost is not None and state.cost >= self.cost and math.isfinite(state.cost):
            return HaltReason.BUDGET
        return None


@dataclass(frozen=True, slots=True)
class _StopNever(StopPolicy):
    def __call__(self, state: LoopState) -> HaltReason | None:
        return None


def stop_after_steps(max_steps: int) -> StopPolicy:
    """Halt with ``step_limit`` once ``max_steps`` steps were taken (a cost upper bound)."""
    return _StopAfterSteps(max_steps)


def stop_after_delay(seconds: float) -> StopPolicy:
    """Halt with ``deadline`` once ``seconds`` have elapsed; calls in flight are cancelled."""
    return _StopAfterDelay(seconds)


def stop_on_no_progress(steps: int) -> StopPolicy:
    """Halt with ``no_progress`` after ``steps`` consecutive steps without new information."""
    return _StopOnNoProgress(steps)


def stop_on_repeats(repeats: int) -> StopPolicy:
    """Halt with ``repeated_action`` once the latest action repeated ``repeats`` times."""
    return _StopOnRepeats(repeats)


def stop_on_budget(*, tokens: int | None = None, cost: float | None = None) -> StopPolicy:
    """Halt with ``budget`` once the run used ``tokens`` tokens or ``cost`` dollars."""
    return _StopOnBudget(tokens, cost)


def stop_never() -> StopPolicy:
    """Never fires (the neutral element of ``|``)."""
    return _StopNever()


def as_stop_policy(value: StopPolicy | StopFn) -> StopPolicy:
    """A policy as is; a plain callable wrapped in :class:`StopWhen`."""
    if isinstance(value, StopPolicy):
        return value
    if callable(value):
        return StopWhen(value)
    raise ConfigurationError("stop", value, "must be a stop policy or a callable(LoopState)")
