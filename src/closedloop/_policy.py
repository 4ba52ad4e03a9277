"""One policy algebra: stop, retry and wait strategies over one state snapshot.

The style is tenacity's: a strategy's name says which slot it plugs into (``stop_…``,
``retry_if_…``, ``wait_…``), and strategies compose. ``stop_after_attempt(3) |
stop_after_delay(10)`` fires when either part fires, ``&`` only when every part fires;
waits add up with ``+`` (``wait_exponential() + wait_random(0, 0.1)``). Every strategy is a
frozen dataclass and a pure function of one :class:`PolicyState`, so a test builds a state by
hand and never sleeps.

A *condition* (:class:`Policy`) answers ``policy(state) -> reason | None``: the reason it
fired, or ``None``. Stop policies and retry conditions are both conditions; only the slot
they fill differs. A :class:`Wait` answers ``wait(state) -> seconds``. A
:class:`RetryPolicy` puts one of each slot together and turns a state into one
:class:`PolicyDecision`: attempt, wait, or stop. The state and the decision live in
``_policy_state.py``, the waits in ``_wait.py``, the drivers that run a retry loop on a
policy in ``_retrying.py``; ``closedloop.policy`` gathers them all.

Combinators (:class:`AnyOf`, :class:`AllOf`, :class:`WaitSum`) have class names; the
strategies a user writes by hand have lowercase phrase names, as tenacity's do.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Generic, TypeVar

from ._exceptions import ConfigurationError
from ._policy_state import PROGRAMMING_ERRORS, PolicyDecision, PolicyState, Verdict
from ._public import present_under
from ._validation import require_int_at_least, require_non_negative
from ._wait import (
    Wait,
    wait_exponential,
    wait_none,
    wait_random,
)

__all__ = [
    "AllOf",
    "AnyOf",
    "Policy",
    "RetryPolicy",
    "retry_if_exception",
    "retry_if_exception_type",
    "retry_if_result",
    "retry_never",
    "stop_after_attempt",
    "stop_after_backoff",
    "stop_after_delay",
    "stop_never",
    "stop_on_fact",
    "when",
]

R = TypeVar("R")

# --- conditions: stop policies and retry conditions -------------------------------------


class Policy(ABC, Generic[R]):
    """A condition over a :class:`PolicyState`: ``policy(state) -> reason | None``.

    ``a | b`` fires when either fires (the first to fire names the reason); ``a & b``
    only when both fire (the first part names it). A plain callable on either side is
    taken as :class:`when`.
    """

    __slots__ = ()

    @abstractmethod
    def __call__(self, state: PolicyState) -> R | None: ...

    def __or__(self, other: Policy[R] | Callable[[PolicyState], Any]) -> AnyOf[R]:
        return AnyOf((*_parts(self, AnyOf), *_parts(self._lift(other), AnyOf)))

    def __ror__(self, other: Callable[[PolicyState], Any]) -> AnyOf[R]:
        return AnyOf((*_parts(self._lift(other), AnyOf), *_parts(self, AnyOf)))

    def __and__(self, other: Policy[R] | Callable[[PolicyState], Any]) -> AllOf[R]:
        return AllOf((*_parts(self, AllOf), *_parts(self._lift(other), AllOf)))

    def __rand__(self, other: Callable[[PolicyState], Any]) -> AllOf[R]:
        return AllOf((*_parts(self._lift(other), AllOf), *_parts(self, AllOf)))

    def decide(self, state: PolicyState) -> PolicyDecision:
        """As a stop policy: stop with the reason if it fires, else go on."""
        reason = self(state)
        if reason is None:
            return PolicyDecision(Verdict.ATTEMPT)
        return PolicyDecision(Verdict.STOP, reason=reason)

    def max_delay_s(self) -> float | None:
        """The elapsed time at which this policy surely fires, if it has one.

        A loop uses it to cancel a call in flight at the deadline instead of waiting for
        the call to return.
        """
        return None

    def fires_on_results(self) -> bool:
        """Whether this condition can fire after an attempt that returned (rather than
        raised); a driver skips judging a returned attempt when its retry slot cannot."""
        return True

    def reason_family(self) -> Any:
        """A reason this policy gives; a plain callable composed with it answers ``True``
        with the ``cancelled`` member of the same enum (the caller's own code chose)."""
        return getattr(self, "reason", None)

    def _lift(self, other: Any) -> Policy[Any]:
        if isinstance(other, Policy):
            return other
        if callable(other):
            return when(other, _cancelled_like(self.reason_family()))
        raise ConfigurationError("policy", other, "must be a policy or a callable(PolicyState)")


def _cancelled_like(reason: Any) -> Any:
    if isinstance(reason, Enum):
        try:
            return type(reason)("cancelled")
        except ValueError:
            pass
    return "cancelled"


def _parts(policy: Policy[Any], kind: type[AnyOf[Any]] | type[AllOf[Any]]) -> tuple[Any, ...]:
    # Chains flatten instead of nesting, so | and & stay associative in structure too.
    return policy.parts if isinstance(policy, kind) else (policy,)


@dataclass(frozen=True, slots=True)
class AnyOf(Policy[R]):
    """Fires when any part fires; the first part that fires names the reason."""

    parts: tuple[Policy[R], ...]

    def __post_init__(self) -> None:
        if not self.parts or not all(isinstance(p, Policy) for p in self.parts):
            raise ConfigurationError("parts", self.parts, "must be one or more policies")

    def __call__(self, state: PolicyState) -> R | None:
        for part in self.parts:
            reason = part(state)
            if reason is not None:
                return reason
        return None

    def max_delay_s(self) -> float | None:
        """The earliest deadline among the parts: whichever fires first ends the loop."""
        delays = [d for d in (p.max_delay_s() for p in self.parts) if d is not None]
        return min(delays) if delays else None

    def fires_on_results(self) -> bool:
        """Whether any part can fire after an attempt that returned."""
        return any(p.fires_on_results() for p in self.parts)

    def reason_family(self) -> Any:
        """The first part's reason family: the enum a composed plain callable answers in."""
        return self.parts[0].reason_family()


@dataclass(frozen=True, slots=True)
class AllOf(Policy[R]):
    """Fires only when every part fires; the first part names the reason."""

    parts: tuple[Policy[R], ...]

    def __post_init__(self) -> None:
        if not self.parts or not all(isinstance(p, Policy) for p in self.parts):
            raise ConfigurationError("parts", self.parts, "must be one or more policies")

    def __call__(self, state: PolicyState) -> R | None:
        reasons = [part(state) for part in self.parts]
        if all(r is not None for r in reasons):
            return reasons[0]
        return None

    def fires_on_results(self) -> bool:
        """Whether every part can fire after an attempt that returned (all must, for the whole)."""
        return all(p.fires_on_results() for p in self.parts)

    def reason_family(self) -> Any:
        """The first part's reason family: the enum a composed plain callable answers in."""
        return self.parts[0].reason_family()


@dataclass(frozen=True, slots=True)
class when(Policy[Any]):
    """A plain callable as a condition: ``True`` fires with ``reason``, ``False`` or
    ``None`` does not, any other answer is the reason itself (of ``reason``'s enum when
    ``reason`` is an enum member)."""

    fn: Callable[[PolicyState], Any]
    reason: Any = "cancelled"

    def __post_init__(self) -> None:
        if not callable(self.fn):
            raise ConfigurationError("fn", self.fn, "must be callable with a PolicyState")

    def __call__(self, state: PolicyState) -> Any:
        verdict = self.fn(state)
        if verdict is None or verdict is False:
            return None
        if verdict is True:
            return self.reason
        if isinstance(self.reason, Enum) and not isinstance(verdict, type(self.reason)):
            raise ConfigurationError(
                "stop",
                verdict,
                f"a stop or retry callable must return a bool, None or a {type(self.reason)}",
            )
        return verdict


@dataclass(frozen=True, slots=True)
class stop_after_attempt(Policy[Any]):
    """Fire once ``attempts`` attempts were made (1 means never retry)."""

    attempts: int
    reason: Any = "attempts"

    def __post_init__(self) -> None:
        require_int_at_least("attempts", self.attempts, 1)

    def __call__(self, state: PolicyState) -> Any:
        return self.reason if state.attempt >= self.attempts else None


@dataclass(frozen=True, slots=True)
class stop_after_delay(Policy[Any]):
    """Fire once ``seconds`` have elapsed since the first attempt (a wall-clock limit)."""

    seconds: float
    reason: Any = "deadline"

    def __post_init__(self) -> None:
        require_non_negative("seconds", self.seconds)

    def __call__(self, state: PolicyState) -> Any:
        return self.reason if state.elapsed_s >= self.seconds else None

    def max_delay_s(self) -> float | None:
        """The configured delay: once that much time has elapsed, this stop fires."""
        return self.seconds


@dataclass(frozen=True, slots=True)
class stop_after_backoff(Policy[Any]):
    """Fire once the backoff already slept reaches ``seconds`` (a budget of waiting)."""

    seconds: float
    reason: Any = "backoff"

    def __post_init__(self) -> None:
        require_non_negative("seconds", self.seconds)

    def __call__(self, state: PolicyState) -> Any:
        return self.reason if state.slept_s >= self.seconds else None


@dataclass(frozen=True, slots=True)
class stop_on_fact(Policy[Any]):
    """Fire once the domain fact ``name`` reaches ``at_least`` (a count, tokens, cost).

    A missing fact never fires; nor does a non-finite one (an unknown cost is no reason).
    """

    name: str
    at_least: float
    reason: Any = "limit"

    def __post_init__(self) -> None:
        if not (isinstance(self.name, str) and self.name):
            raise ConfigurationError("name", self.name, "must be a fact name")
        require_non_negative("at_least", self.at_least)

    def __call__(self, state: PolicyState) -> Any:
        value = state.facts.get(self.name)
        if value is None or not math.isfinite(value):
            return None
        return self.reason if value >= self.at_least else None


@dataclass(frozen=True, slots=True)
class stop_never(Policy[Any]):
    """Never fires (the neutral element of ``|``); ``reason`` only names the family a
    callable composed with it reports in."""

    reason: Any = "cancelled"

    def __call__(self, state: PolicyState) -> Any:
        return None


class _OnError(Policy[str]):
    """A retry condition on the error an attempt raised; it names the error's type."""

    __slots__ = ()

    def __call__(self, state: PolicyState) -> str | None:
        error = state.error
        if error is not None and self._matches(error):
            return type(error).__name__
        return None

    @abstractmethod
    def _matches(self, error: BaseException) -> bool: ...

    def fires_on_results(self) -> bool:
        """Never: this condition judges only attempts that raised."""
        return False


@dataclass(frozen=True, slots=True, init=False)
class retry_if_exception_type(_OnError):
    """Fire for errors of the given types (default any ``Exception``), except ``exclude``
    (default the programming errors, which retrying only repeats)."""

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

    def _matches(self, error: BaseException) -> bool:
        return isinstance(error, self.types) and not isinstance(error, self.exclude)


@dataclass(frozen=True, slots=True)
class retry_if_exception(_OnError):
    """Fire when the attempt raised and ``predicate(error)`` is true."""

    predicate: Callable[[BaseException], object]

    def _matches(self, error: BaseException) -> bool:
        return bool(self.predicate(error))


@dataclass(frozen=True, slots=True)
class retry_if_result(Policy[str]):
    """Fire when the attempt returned and ``predicate(result)`` is true."""

    predicate: Callable[[Any], object]
    reason: str = "result"

    def __call__(self, state: PolicyState) -> str | None:
        if state.error is None and self.predicate(state.outcome):
            return self.reason
        return None


@dataclass(frozen=True, slots=True)
class retry_never(Policy[str]):
    """Never retry."""

    def __call__(self, state: PolicyState) -> str | None:
        return None

    def fires_on_results(self) -> bool:
        """Never: this condition fires on nothing."""
        return False


# --- one retry policy ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """When to retry a failed attempt and how long to wait first: three slots.

    ``retry`` says whether the attempt failed in a way worth another try, ``stop`` when to
    give up anyway, ``wait`` how long to back off. The default makes one attempt. Policies
    are values: a controller may hand a different one per call.
    """

    stop: Policy[Any] = field(default_factory=lambda: stop_after_attempt(1))
    wait: Wait = field(default_factory=wait_none)
    retry: Policy[Any] = field(default_factory=retry_if_exception_type)

    def __post_init__(self) -> None:
        for name, value, kind in (
            ("stop", self.stop, Policy),
            ("wait", self.wait, Wait),
            ("retry", self.retry, Policy),
        ):
            if not isinstance(value, kind):
                raise ConfigurationError(name, value, f"must be a {kind.__name__}")

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
        wait: Wait = wait_exponential(initial_s, multiplier, max_s)
        if jitter_s > 0:
            wait = wait + wait_random(0.0, jitter_s)
        else:
            require_non_negative("jitter_s", jitter_s)
        return cls(stop_after_attempt(attempts), wait, retry_if_exception_type(*retry_on))

    def decide(self, state: PolicyState) -> PolicyDecision:
        """After an attempt: stop (done, not worth retrying, or out of tries) or wait.

        A stop with ``reason=None`` means the attempt needs no retry; otherwise the reason
        is what the ``stop`` slot gave.
        """
        if self.retry(state) is None:
            return PolicyDecision(Verdict.STOP)
        reason = self.stop(state)
        if reason is not None:
            return PolicyDecision(Verdict.STOP, reason=reason)
        return PolicyDecision(Verdict.WAIT, max(0.0, float(self.wait(state))))

    def should_retry(self, state: PolicyState) -> bool:
        """True when the attempt is worth retrying and the stop slot allows it."""
        return self.decide(state).verdict is not Verdict.STOP

    def delay(self, state: PolicyState) -> float:
        """Seconds to wait before the next attempt (never negative)."""
        return max(0.0, float(self.wait(state)))


# Public names show as closedloop.policy.X in reprs and docs (httpx does the same).
present_under(globals(), __all__, "closedloop.policy")
