"""The one retry loop, as a sync and an async driver over a :class:`RetryPolicy`.

Each driver runs ``attempt(n)``, builds the :class:`PolicyState` of what happened (the
result or the error, the time elapsed on the injected clock, the backoff slept so far and
the facts ``observe`` adds), asks the policy for one :class:`PolicyDecision`, and either
ends or sleeps through the injected ``sleep`` and tries again. The two drivers share
every decision (one generator, ``_plan``); only calling and sleeping differ. Tests pass a recording
sleep and a fake clock and never wait.
"""

from __future__ import annotations

import asyncio
import inspect
import random
import time
from collections.abc import Awaitable, Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

from ._exceptions import ConfigurationError
from ._policy import RetryPolicy
from ._policy_state import PROGRAMMING_ERRORS, PolicyDecision, PolicyState, Verdict
from ._public import present_under

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


@dataclass(frozen=True, slots=True)
class _Try:
    """The plan's next step: make attempt ``n``, first backing off as the decision in
    ``retry`` says; ``retry`` is ``(state, decision)``, ``None`` before the first attempt."""

    n: int
    retry: tuple[PolicyState, PolicyDecision] | None = None


_Outcome = tuple[Any, BaseException | None]
_Plan = Generator[_Try | Retried[Any], _Outcome, None]


def _plan(
    policy: RetryPolicy,
    clock: Callable[[], float],
    rng: random.Random | None,
    observe: Observe | None,
) -> _Plan:
    """Every decision of the retry loop, shared by both drivers (tenacity's ``iter``).

    It yields a :class:`_Try` and is sent back the attempt's ``(value, error)``, until it
    yields the :class:`Retried` that ends the loop. The drivers only sleep and call.
    """
    if not isinstance(policy, RetryPolicy):
        raise ConfigurationError("policy", policy, "must be a RetryPolicy")
    # A returned attempt needs no judging when nothing can fire on it: the common
    # case (retry on exceptions only) then costs no state and no decision.
    judge_results = observe is not None or policy.retry.fires_on_results()
    start = clock()
    delays: tuple[float, ...] = ()
    attempt = 1
    value, error = yield _Try(attempt)
    while True:
        if error is None and not judge_results:
            yield Retried(value, None, attempt, delays)
            return
        facts = {} if observe is None else dict(observe(attempt, value, error))
        if rng is None:
            # Made when a state is first judged: seeding a generator costs tens of
            # microseconds, more than an attempt that returns and needs no judging.
            rng = random.Random(0)
        state = PolicyState(
            attempt=attempt,
            elapsed_s=max(0.0, clock() - start),
            outcome=value,
            error=error,
            slept_s=sum(delays),
            facts=facts,
            rng=rng,
        )
        decision = policy.decide(state)
        if decision.verdict is Verdict.STOP:
            yield Retried(value, error, attempt, delays, decision.reason)
            return
        delays = (*delays, decision.delay_s)
        attempt += 1
        value, error = yield _Try(attempt, (state, decision))


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
    plan = _plan(policy, clock, rng, observe)
    step = next(plan)
    while isinstance(step, _Try):
        if step.retry is not None:
            if before_sleep is not None:
                before_sleep(*step.retry)
            sleep(step.retry[1].delay_s)
        try:
            outcome: _Outcome = (attempt(step.n), None)
        except passthrough:
            raise
        except Exception as exc:
            outcome = (None, exc)
        step = plan.send(outcome)
    return cast(Retried[T], step)


# retry_async restates retry_sync's keywords on purpose: the two drivers are one typed API,
# sync and async; every decision behind them is _plan's.
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
    plan = _plan(policy, clock, rng, observe)
    step = next(plan)
    while isinstance(step, _Try):
        if step.retry is not None:
            pending = None if before_sleep is None else before_sleep(*step.retry)
            if inspect.isawaitable(pending):
                await pending
            await sleep(step.retry[1].delay_s)
        try:
            outcome: _Outcome = (await attempt(step.n), None)
        except passthrough:
            raise
        except Exception as exc:
            outcome = (None, exc)
        step = plan.send(outcome)
    return cast(Retried[T], step)


# Public names show as closedloop.policy.X in reprs and docs (httpx does the same).
present_under(globals(), __all__, "closedloop.policy")
