"""The attempt loop shared by the decorator and the LangGraph adapter.

One call: read the key's settings, run an attempt, measure its error, update the PID,
and retry while the attempt failed and the *updated* settings still allow a retry. The
retry waits the updated ``retry_delay_ms`` through an injected sleep. The loop is the one
retry driver of :mod:`closedloop.policy`; :attr:`RetryPlan.policy` says, over the facts
each attempt adds (failed, the scheduled retries and delay), when to retry and how long
to wait. Only the waiting and the timeout differ between sync and async.

An attempt fails when it raises a retryable exception (error 1.0) or its result scores
above ``retry_above``. When the attempts run out, the last exception is raised again, or
the last result is returned (its error is in the history for whoever watches).
Exceptions that ``retry_on`` rejects (by default programming errors such as
``TypeError``) pass straight through without touching the controller: they measure the
code, not the world it calls.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeAlias, TypeVar

from .._exceptions import ConfigurationError
from .._policy import Policy, RetryPolicy, retry_if_exception_type, stop_after_attempt, when
from .._policy_state import PolicyState
from .._retrying import retry_async, retry_sync
from .._validation import require_int_at_least, require_unit_interval
from .._wait import wait_fact
from ._loop import ControlContext, ControlLoop, ControlRecord
from ._metrics import EXCEPTION_ERROR, Invocation, check_error

__all__ = [
    "Attempts",
    "RetryOn",
    "RetryPlan",
    "awaitable_sleep",
    "run_async",
    "run_sync",
    "to_retry_predicate",
]

T = TypeVar("T")

RetryOn: TypeAlias = (
    type[BaseException]
    | tuple[type[BaseException], ...]
    | Policy[Any]
    | Callable[[BaseException], bool]
)
"""Exception classes to retry, a predicate on the exception, or a retry condition of
:mod:`closedloop.policy` such as ``retry_if_exception_type(OSError)``."""


def to_retry_predicate(retry_on: RetryOn | None) -> Callable[[BaseException], bool]:
    """Normalise ``retry_on``; ``None`` is ``retry_if_exception_type()`` (no programming
    errors)."""
    if retry_on is None:
        return _on_error(retry_if_exception_type())
    if isinstance(retry_on, type | tuple):
        types = retry_on if isinstance(retry_on, tuple) else (retry_on,)
        return _on_error(retry_if_exception_type(*types))
    if isinstance(retry_on, Policy):
        return _on_error(retry_on)
    if callable(retry_on):
        return retry_on
    raise ConfigurationError(
        "retry_on", retry_on, "must be exception classes or a predicate on the exception"
    )


def _on_error(condition: Policy[Any]) -> Callable[[BaseException], bool]:
    return lambda error: condition(PolicyState(error=error)) is not None


def _failed(state: PolicyState) -> bool:
    return bool(state.fact("failed", False))


def _out_of_scheduled_retries(state: PolicyState) -> bool:
    # attempt − 1 retries are spent; the settings just produced decide the budget.
    return state.attempt > int(state.fact("max_retries", 0))


@dataclass(frozen=True, slots=True)
class Attempts(Generic[T]):
    """The accepted (or last) result of a call and the records of all its attempts."""

    result: T
    records: tuple[ControlRecord, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPlan:
    """Everything the attempt loop needs besides the call itself."""

    loop: ControlLoop
    sensor: Callable[[Any, Invocation], Any]
    retry_if: Callable[[BaseException], bool]
    retry_above: float = 0.5
    max_attempts: int = 10
    clock: Callable[[], float] = time.monotonic
    enforce_timeout: bool = False

    def __post_init__(self) -> None:
        require_unit_interval("retry_above", self.retry_above)
        require_int_at_least("max_attempts", self.max_attempts, 1)
        if not callable(self.clock):
            raise ConfigurationError("clock", self.clock, "must be callable returning seconds")

    @property
    def policy(self) -> RetryPolicy:
        """Retry a failed attempt while the updated settings allow it, after their delay."""
        return RetryPolicy(
            stop=stop_after_attempt(self.max_attempts) | when(_out_of_scheduled_retries),
            wait=wait_fact("retry_delay_s"),
            retry=when(_failed, "failed"),
        )

    def _retryable(self, exc: BaseException) -> bool:
        return isinstance(exc, Exception) and bool(self.retry_if(exc))


class _Call:
    """One call's bookkeeping: each attempt's context, its measured error, its record."""

    __slots__ = ("call", "invocation", "key", "plan", "records", "start")

    def __init__(self, plan: RetryPlan, key: str, invocation: Invocation) -> None:
        self.plan = plan
        self.key = key
        self.invocation = invocation
        self.call = plan.loop.begin_call()
        self.records: list[ControlRecord] = []
        self.start = 0.0

    def driver(self, sleep: Callable[[float], Any]) -> dict[str, Any]:
        """What the retry driver (sync or async) takes besides the attempt and the policy."""
        return {
            "sleep": sleep,
            "clock": self.plan.clock,
            "observe": self.observe,
            "passthrough": (),
        }

    def context(self, attempt: int) -> ControlContext:
        ctx = self.plan.loop.context(self.key, attempt)
        self.start = self.plan.clock()
        return ctx

    def observe(self, attempt: int, result: Any, exc: BaseException | None) -> dict[str, Any]:
        """Update the PID with the attempt's error; the facts the retry policy reads."""
        plan = self.plan
        if exc is not None and not plan._retryable(exc):
            return {"failed": False}  # passes straight through, the controller untouched
        latency = plan.clock() - self.start
        exception: str | None = None
        note: str | None = None
        if exc is not None:
            error, failed = EXCEPTION_ERROR, True
            exception = f"{type(exc).__name__}: {exc}"
        else:
            error, note = check_error(plan.sensor(result, self.invocation))
            failed = error > plan.retry_above
        record = plan.loop.update(
            self.key,
            error,
            call=self.call,
            attempt=attempt,
            failed=failed,
            exception=exception,
            latency_s=latency,
            note=note,
        )
        self.records.append(record)
        return {
            "failed": failed,
            "max_retries": record.settings.max_retries,
            "retry_delay_s": record.settings.retry_delay_ms / 1000.0,
        }


def run_sync(
    plan: RetryPlan,
    key: str,
    invocation: Invocation,
    attempt_fn: Callable[[ControlContext], T],
    sleep: Callable[[float], object],
) -> Attempts[T]:
    """Run ``attempt_fn`` under the controller, retrying synchronously."""
    call = _Call(plan, key, invocation)
    done = retry_sync(lambda n: attempt_fn(call.context(n)), plan.policy, **call.driver(sleep))
    return Attempts(done.unwrap(), tuple(call.records))


async def run_async(
    plan: RetryPlan,
    key: str,
    invocation: Invocation,
    attempt_fn: Callable[[ControlContext], Awaitable[T]],
    sleep: Callable[[float], Awaitable[object]],
) -> Attempts[T]:
    """Run ``attempt_fn`` under the controller, retrying with an awaited sleep.

    With ``enforce_timeout`` each attempt is cancelled after the scheduled timeout; the
    resulting ``TimeoutError`` is an attempt error like any other.
    """
    call = _Call(plan, key, invocation)

    async def attempt(n: int) -> T:
        ctx = call.context(n)
        if plan.enforce_timeout:
            async with asyncio.timeout(ctx.timeout_s):
                return await attempt_fn(ctx)
        return await attempt_fn(ctx)

    done = await retry_async(attempt, plan.policy, **call.driver(sleep))
    return Attempts(done.unwrap(), tuple(call.records))


def awaitable_sleep(sleep: Callable[[float], Any] | None) -> Callable[[float], Awaitable[None]]:
    """``sleep`` (sync or async; default ``asyncio.sleep``) as the awaited wait of a retry."""
    chosen = asyncio.sleep if sleep is None else sleep

    async def wait(seconds: float) -> None:
        pending = chosen(seconds)
        if inspect.isawaitable(pending):
            await pending

    return wait
