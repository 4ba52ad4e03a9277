"""Waits: how long to back off before the next attempt; ``+`` adds them up."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

from ._exceptions import ConfigurationError
from ._policy_state import PolicyState
from ._public import present_under
from ._validation import require_non_negative, require_positive

__all__ = [
    "Wait",
    "WaitSum",
    "wait_exponential",
    "wait_fact",
    "wait_fixed",
    "wait_jitter",
    "wait_none",
    "wait_random",
]


class Wait(ABC):
    """How long to back off before the next attempt: ``wait(state) -> seconds``."""

    __slots__ = ()

    @abstractmethod
    def __call__(self, state: PolicyState) -> float: ...

    def __add__(self, other: Wait) -> WaitSum:
        if not isinstance(other, Wait):
            return NotImplemented
        return WaitSum((*_waits(self), *_waits(other)))


def _waits(wait: Wait) -> tuple[Wait, ...]:
    return wait.parts if isinstance(wait, WaitSum) else (wait,)


@dataclass(frozen=True, slots=True)
class WaitSum(Wait):
    """The sum of its parts."""

    parts: tuple[Wait, ...]

    def __call__(self, state: PolicyState) -> float:
        return sum(part(state) for part in self.parts)


@dataclass(frozen=True, slots=True)
class wait_none(Wait):
    """Retry at once."""

    def __call__(self, state: PolicyState) -> float:
        return 0.0


@dataclass(frozen=True, slots=True)
class wait_fixed(Wait):
    """The same delay every time."""

    seconds: float

    def __post_init__(self) -> None:
        require_non_negative("seconds", self.seconds)

    def __call__(self, state: PolicyState) -> float:
        return self.seconds


@dataclass(frozen=True, slots=True)
class wait_exponential(Wait):
    """``initial_s * multiplier ** (attempt - 1)``, capped at ``max_s``."""

    initial_s: float = 0.1
    multiplier: float = 2.0
    max_s: float = 30.0

    def __post_init__(self) -> None:
        require_non_negative("initial_s", self.initial_s)
        require_positive("multiplier", self.multiplier)
        require_non_negative("max_s", self.max_s)

    def __call__(self, state: PolicyState) -> float:
        # Exponent capped so a long-running retry loop cannot overflow to inf.
        exponent = min(max(state.attempt - 1, 0), 512)
        try:
            raw = self.initial_s * self.multiplier**exponent
        except OverflowError:
            return self.max_s
        return min(raw, self.max_s)


@dataclass(frozen=True, slots=True)
class wait_random(Wait):
    """Uniform jitter in ``[min_s, max_s]`` drawn from the state's seeded source."""

    min_s: float = 0.0
    max_s: float = 0.1

    def __post_init__(self) -> None:
        require_non_negative("min_s", self.min_s)
        require_non_negative("max_s", self.max_s)
        if self.min_s > self.max_s:
            raise ConfigurationError("min_s", self.min_s, f"must be <= max_s={self.max_s}")

    def __call__(self, state: PolicyState) -> float:
        return state.rng.uniform(self.min_s, self.max_s)


@dataclass(frozen=True, slots=True)
class wait_jitter(Wait):
    """Full jitter: a uniform draw in ``[0, base(state)]`` spreads synchronised clients
    apart (Brooker, "Exponential Backoff and Jitter", AWS Architecture Blog 2015)."""

    base: Wait = field(default_factory=wait_exponential)

    def __call__(self, state: PolicyState) -> float:
        return state.rng.uniform(0.0, self.base(state))


@dataclass(frozen=True, slots=True)
class wait_fact(Wait):
    """The delay a domain fact names (a controller's scheduled retry delay, in seconds)."""

    name: str
    default: float = 0.0

    def __call__(self, state: PolicyState) -> float:
        return float(state.facts.get(self.name, self.default))


# Public names show as closedloop.policy.X in reprs and docs (httpx does the same).
present_under(globals(), __all__, "closedloop.policy")
