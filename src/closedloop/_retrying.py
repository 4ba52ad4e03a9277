"""The one retry loop, as a sync and an async driver over a :class:`RetryPolicy`.

Each driver runs ``attempt(n)``, builds the :class:`PolicyState` of what happened (the
result or the error, the time elapsed on the injected clock, the backoff slept so far and
the facts ``observe`` adds), asks the policy for one :class:`PolicyDecision`, and either
ends or sleeps through the injected ``sleep`` and tries again. The two drivers share
every decision (``_Loop``); only calling and sleeping differ. Tests pass a recording
sleep and a fake clock and never wait.
"""

from __future__ import annotations

import asyncio
import inspect
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from types import FunctionType
from typing import Any, Generic, TypeVar, cast

from ._exceptions import ConfigurationError
from ._policy import PROGRAMMING_ERRORS, PolicyDecision, PolicyState, RetryPolicy, Verdict

__all__ = ["Observe", "Retried", "retry_async", "retry_sync"]

T = TypeVar("T")

Observe = Callable[[int, Any, BaseException | None], Mapping[str, Any]]
"""``observe(attempt, result, error) -> facts``: what the caller adds to each state."""


@dataclass(frozen=True, slots=True)
class Retried(Generic[T]):
    """How a retry loop ended: the last result or error, and what it cost.

    ``reason`` is the stop slot's reason when the policy gave up while retries were still
    wanted, ``None`` when the last attempt needed no retry.
    """

    value: T | None
    error: BaseException | None
    attempts: int
    delays: tuple[float, ...]
    reason: Any = None

    @property
    def slept_s(self) -> float:
        """The backoff spent between the attempts."""
        return sum(self.delays)

    @property
    def ok(self) -> bool:
        """Whether the last attempt returned (rather than raised)."""
        return self.error is None

    def unwrap(self) -> T:
        """The last result; the last error raised again if the attempt raised."""
        if self.error is not None:
            raise self.error
        return cast(T, self.value)


class _Loop:
    """The bookkeeping both drivers share: one state per attempt, one decision each."""

    __slots__ = ("attempt", "clock", "delays", "judge_results", "observe", "policy", "rng", "start")

    def __init__(
        self,
        policy: RetryPolicy,
        clock: Callable[[], float],
        rng: random.Random | None,
        observe: Observe | None,
    ) -> None:
        if not isinstance(policy, RetryPolicy):
            raise ConfigurationError("policy", policy, "must be a RetryPolicy")
        self.policy = policy
        self.clock = clock
        # Made when a state is first judged: seeding a generator costs tens of microseconds,
        # more than an attempt that returns and needs no judging.
        self.rng = rng
        self.observe = observe
        # A returned attempt needs no judging when nothing can fire on it: the common
        # case (retry on exceptions only) then costs no state and no decision.
        self.judge_results = observe is not None or policy.retry.fires_on_results()
        self.start = clock()
        self.attempt = 0
        self.delays: tuple[float, ...] = ()

    def judge(self, value: Any, error: BaseException | None) -> tuple[PolicyState, PolicyDecision]:
        facts = {} if self.observe is None else dict(self.observe(self.attempt, value, error))
        if self.rng is None:
            self.rng = random.Random(0)
        state = PolicyState(
            attempt=self.attempt,
            elapsed_s=max(0.0, self.clock() - self.start),
            outcome=value,
            error=error,
            slept_s=sum(self.delays),
            facts=facts,
            rng=self.rng,
        )
        return state, self.policy.decide(state)

    def end(self, value: Any, error: BaseException | None, reason: Any = None) -> Retried[Any]:
        return Retried(value, error, self.attempt, self.delays, reason)


def retry_sync(
    attempt: Callable[[int], T],
    policy: RetryPolicy,
    *,
    sleep: Callable[[float], object] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    rng: random.Random | None = None,
    observe: Observe | None = None,
    before_sleep: Callable[[PolicyState, PolicyDecision], object] | None = None,
    passthrough: tuple[type[BaseException], ...] = PROGRAMMING_ERRORS,
) -> Retried[T]:
    """Run ``attempt(n)`` (n = 1, 2, …) until ``policy`` says stop.

    Exceptions in ``passthrough`` (default the programming errors) and anything that is
    not an ``Exception`` propagate at once; other errors are judged like results.
    ``before_sleep(state, decision)`` sees each retry before its wait.
    """
    loop = _Loop(policy, clock, rng, observe)
    while True:
        loop.attempt += 1
        value: Any = None
        error: BaseException | None = None
        try:
            value = attempt(loop.attempt)
        except passthrough:
            raise
        except Exception as exc:
            error = exc
        if error is None and not loop.judge_results:
            return cast(Retried[T], loop.end(value, None))
        state, decision = loop.judge(value, error)
        if decision.verdict is Verdict.STOP:
            return cast(Retried[T], loop.end(value, error, decision.reason))
        if before_sleep is not None:
            before_sleep(state, decision)
        loop.delays = (*loop.delays, decision.delay_s)
        sleep(decision.delay_s)


async def retry_async(
    attempt: Callable[[int], Awaitable[T]],
    policy: RetryPolicy,
    *,
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    clock: Callable[[], float] = time.monotonic,
    rng: random.Random | None = None,
    observe: Observe | None = None,
    before_sleep: Callable[[PolicyState, PolicyDecision], object] | None = None,
    passthrough: tuple[type[BaseException], ...] = PROGRAMMING_ERRORS,
) -> Retried[T]:
    """:func:`retry_sync` for coroutines: the attempt and the sleep are awaited.

    ``before_sleep`` may be sync or async.
    """
    loop = _Loop(policy, clock, rng, observe)
    while True:
        loop.attempt += 1
        value: Any = None
        error: BaseException | None = None
        try:
            value = await attempt(loop.attempt)
        except passthrough:
            raise
        except Exception as exc:
            error = exc
        if error is None and not loop.judge_results:
            return cast(Retried[T], loop.end(value, None))
        state, decision = loop.judge(value, error)
        if decision.verdict is Verdict.STOP:
            return cast(Retried[T], loop.end(value, error, decision.reason))
        if before_sleep is not None:
            pending = before_sleep(state, decision)
            if inspect.isawaitable(pending):
                await pending
        loop.delays = (*loop.delays, decision.delay_s)
        await sleep(decision.delay_s)


# Public names show as closedloop.policy.X in reprs and docs (httpx does the same).
for _name in __all__:
    _obj = globals()[_name]
    if isinstance(_obj, type | FunctionType):
        _obj.__module__ = "closedloop.policy"
