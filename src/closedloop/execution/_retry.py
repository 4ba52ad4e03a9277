"""Retry policies as a small language of frozen strategies over one state snapshot.

A policy is three strategies: ``stop`` (when to give up), ``wait`` (how long to back off)
and ``retry`` (which errors are worth another attempt). Each strategy is a pure function of
a :class:`RetryState`, so tests build a state by hand and never sleep. Strategies compose:
``StopAfterAttempt(3) | StopAfterDelay(5.0)``, ``WaitExponential() + WaitRandom(0, 0.1)``,
``RetryIfException(OSError) | RetryIfException(TimeoutError)``.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field

from .._exceptions import ConfigurationError
from .._validation import require_int_at_least, require_non_negative, require_positive

__all__ = [
    "PROGRAMMING_ERRORS",
    "RetryIf",
    "RetryIfAll",
    "RetryIfAny",
    "RetryIfException",
    "RetryIfPredicate",
    "RetryNever",
    "RetryPolicy",
    "RetryState",
    "Stop",
    "StopAfterAttempt",
    "StopAfterDelay",
    "StopAll",
    "StopAny",
    "Wait",
    "WaitExponential",
    "WaitFixed",
    "WaitFullJitter",
    "WaitNone",
    "WaitRandom",
    "WaitSum",
]

# Errors that mean the code is wrong, not the world: retrying them only repeats the bug.
PROGRAMMING_ERRORS: tuple[type[BaseException], ...] = (
    TypeError,
    AttributeError,
    NameError,
    AssertionError,
    NotImplementedError,
    ConfigurationError,
)


@dataclass(frozen=True, slots=True)
class RetryState:
    """What every strategy sees after a failed attempt.

    ``attempt`` counts the attempts made so far (1 after the first failure); ``slept_s`` is
    the backoff already spent; ``rng`` is the seeded random source for jitter.
    """

    attempt: int
    error: BaseException
    slept_s: float = 0.0
    rng: random.Random = field(default_factory=lambda: random.Random(0), compare=False)


# --- stop ------------------------------------------------------------------------------


class Stop(ABC):
    """When to give up: ``True`` means no further attempt."""

    __slots__ = ()

    @abstractmethod
    def __call__(self, state: RetryState) -> bool: ...

    def __or__(self, other: Stop) -> StopAny:
        parts = [p for s in (self, other) for p in (s.parts if isinstance(s, StopAny) else (s,))]
        return StopAny(tuple(parts))

    def __and__(self, other: Stop) -> StopAll:
        parts = [p for s in (self, other) for p in (s.parts if isinstance(s, StopAll) else (s,))]
        return StopAll(tuple(parts))


@dataclass(frozen=True, slots=True)
class StopAfterAttempt(Stop):
    """Stop once ``attempts`` attempts have been made (1 means never retry)."""

    attempts: int

    def __post_init__(self) -> None:
        require_int_at_least("attempts", self.attempts, 1)

    def __call__(self, state: RetryState) -> bool:
        return state.attempt >= self.attempts


@dataclass(frozen=True, slots=True)
class StopAfterDelay(Stop):
    """Stop once the backoff spent reaches ``max_slept_s`` (a budget, not a wall clock)."""

    max_slept_s: float

    def __post_init__(self) -> None:
        require_non_negative("max_slept_s", self.max_slept_s)

    def __call__(self, state: RetryState) -> bool:
        return state.slept_s >= self.max_slept_s


@dataclass(frozen=True, slots=True)
class StopAny(Stop):
    """Stop when any of the parts says stop."""

    parts: tuple[Stop, ...]

    def __call__(self, state: RetryState) -> bool:
        return any(part(state) for part in self.parts)


@dataclass(frozen=True, slots=True)
class StopAll(Stop):
    """Stop only when every part says stop."""

    parts: tuple[Stop, ...]

    def __call__(self, state: RetryState) -> bool:
        return all(part(state) for part in self.parts)


# --- wait ------------------------------------------------------------------------------


class Wait(ABC):
    """How long to back off before the next attempt, in seconds."""

    __slots__ = ()

    @abstractmethod
    def __call__(self, state: RetryState) -> float: ...

    def __add__(self, other: Wait) -> WaitSum:
        parts = [p for w in (self, other) for p in (w.parts if isinstance(w, WaitSum) else (w,))]
        return WaitSum(tuple(parts))


@dataclass(frozen=True, slots=True)
class WaitNone(Wait):
    """Retry at once."""

    def __call__(self, state: RetryState) -> float:
        return 0.0


@dataclass(frozen=True, slots=True)
class WaitFixed(Wait):
    """The same delay every time."""

    seconds: float

    def __post_init__(self) -> None:
        require_non_negative("seconds", self.seconds)

    def __call__(self, state: RetryState) -> float:
        return self.seconds


@dataclass(frozen=True, slots=True)
class WaitExponential(Wait):
    """``initial_s * multiplier ** (attempt - 1)``, capped at ``max_s``."""

    initial_s: float = 0.1
    multiplier: float = 2.0
    max_s: float = 30.0

    def __post_init__(self) -> None:
        require_non_negative("initial_s", self.initial_s)
        require_positive("multiplier", self.multiplier)
        require_non_negative("max_s", self.max_s)

    def __call__(self, state: RetryState) -> float:
        # Exponent capped so a long-running retry loop cannot overflow to inf.
        exponent = min(max(state.attempt - 1, 0), 512)
        try:
            raw = self.initial_s * self.multiplier**exponent
        except OverflowError:
            return self.max_s
        return min(raw, self.max_s)


@dataclass(frozen=True, slots=True)
class WaitRandom(Wait):
    """Uniform jitter in ``[min_s, max_s]`` drawn from the state's seeded RNG."""

    min_s: float = 0.0
    max_s: float = 0.1

    def __post_init__(self) -> None:
        require_non_negative("min_s", self.min_s)
        require_non_negative("max_s", self.max_s)
        if self.min_s > self.max_s:
            raise ConfigurationError("min_s", self.min_s, f"must be <= max_s={self.max_s}")

    def __call__(self, state: RetryState) -> float:
        return state.rng.uniform(self.min_s, self.max_s)


@dataclass(frozen=True, slots=True)
class WaitFullJitter(Wait):
    """A uniform draw in ``[0, base(state)]``: spreads synchronised clients apart."""

    base: Wait = field(default_factory=WaitExponential)

    def __call__(self, state: RetryState) -> float:
        return state.rng.uniform(0.0, self.base(state))


@dataclass(frozen=True, slots=True)
class WaitSum(Wait):
    """The sum of its parts."""

    parts: tuple[Wait, ...]

    def __call__(self, state: RetryState) -> float:
        return sum(part(state) for part in self.parts)


# --- retry predicates -------------------------------------------------------------------


class RetryIf(ABC):
    """Whether an error is worth another attempt."""

    __slots__ = ()

    @abstractmethod
    def __call__(self, error: BaseException) -> bool: ...

    def __or__(self, other: RetryIf) -> RetryIfAny:
        parts = [p for r in (self, other) for p in (r.parts if isinstance(r, RetryIfAny) else (r,))]
        return RetryIfAny(tuple(parts))

    def __and__(self, other: RetryIf) -> RetryIfAll:
        parts = [p for r in (self, other) for p in (r.parts if isinstance(r, RetryIfAll) else (r,))]
        return RetryIfAll(tuple(parts))


@dataclass(frozen=True, slots=True, init=False)
class RetryIfException(RetryIf):
    """Retry errors of the given types, except the excluded ones."""

    types: tuple[type[BaseException], ...]
    exclude: tuple[type[BaseException], ...]

    def __init__(
        self,
        *types: type[BaseException],
        exclude: tuple[type[BaseException], ...] = PROGRAMMING_ERRORS,
    ) -> None:
        for kind in (*types, *exclude):
            if not (isinstance(kind, type) and issubclass(kind, BaseException)):
                raise ConfigurationError("types", kind, "must be exception classes")
        object.__setattr__(self, "types", types or (Exception,))
        object.__setattr__(self, "exclude", exclude)

    def __call__(self, error: BaseException) -> bool:
        return isinstance(error, self.types) and not isinstance(error, self.exclude)


@dataclass(frozen=True, slots=True)
class RetryIfPredicate(RetryIf):
    """Retry when ``predicate(error)`` is true."""

    predicate: Callable[[BaseException], bool]

    def __call__(self, error: BaseException) -> bool:
        return bool(self.predicate(error))


@dataclass(frozen=True, slots=True)
class RetryIfAny(RetryIf):
    """Retry when any part says retry."""

    parts: tuple[RetryIf, ...]

    def __call__(self, error: BaseException) -> bool:
        return any(part(error) for part in self.parts)


@dataclass(frozen=True, slots=True)
class RetryIfAll(RetryIf):
    """Retry only when every part says retry."""

    parts: tuple[RetryIf, ...]

    def __call__(self, error: BaseException) -> bool:
        return all(part(error) for part in self.parts)


@dataclass(frozen=True, slots=True)
class RetryNever(RetryIf):
    """Never retry."""

    def __call__(self, error: BaseException) -> bool:
        return False


# --- the policy ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """When to retry a failed attempt and how long to wait first.

    The default makes one attempt. Policies are values: the controller may hand a different
    one per call (``execute(..., retry=policy)``) or derive an action with
    ``action.with_retry(policy)``.
    """

    stop: Stop = field(default_factory=lambda: StopAfterAttempt(1))
    wait: Wait = field(default_factory=WaitNone)
    retry: RetryIf = field(default_factory=RetryIfException)

    @classmethod
    def none(cls) -> RetryPolicy:
        """A single attempt."""
        return cls()

    @classmethod
    def exponential(
        cls,
        attempts: int = 3,
        *,
        initial_s: float = 0.1,
        multiplier: float = 2.0,
        max_s: float = 10.0,
        jitter_s: float = 0.1,
        retry_on: tuple[type[BaseException], ...] = (Exception,),
    ) -> RetryPolicy:
        """Up to ``attempts`` attempts, exponential backoff plus uniform jitter."""
        wait: Wait = WaitExponential(initial_s, multiplier, max_s)
        if jitter_s > 0:
            wait = wait + WaitRandom(0.0, jitter_s)
        else:
            require_non_negative("jitter_s", jitter_s)
        return cls(StopAfterAttempt(attempts), wait, RetryIfException(*retry_on))

    def should_retry(self, state: RetryState) -> bool:
        """True when the error is retryable and the stop strategy allows another attempt."""
        return self.retry(state.error) and not self.stop(state)

    def delay(self, state: RetryState) -> float:
        """Seconds to wait before the next attempt (never negative)."""
        return max(0.0, float(self.wait(state)))
