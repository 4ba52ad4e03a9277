"""The attempt loop shared by the decorator and the LangGraph adapter.

One call: read the key's settings, run an attempt, measure its error, update the PID,
and retry while the attempt failed and the *updated* settings still allow a retry. The
retry waits the updated ``retry_delay_ms`` through an injected sleep. A sync and an async
driver share every decision; only the waiting and the timeout differ.

An attempt fails when it raises a retryable exception (error 1.0) or its result scores
above ``retry_above``. When the attempts run out, the last exception is raised again, or
the last result is returned (its error is in the history for whoever watches).
Exceptions that ``retry_on`` rejects (by default programming errors such as
``TypeError``) pass straight through without touching the controller: they measure the
code, not the world it calls.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeAlias, TypeVar

from .._exceptions import ConfigurationError
from .._validation import require_int_at_least, require_unit_interval
from ..execution import RetryIfException
from ._loop import ControlContext, ControlLoop, ControlRecord
from ._metrics import EXCEPTION_ERROR, Invocation, check_error

__all__ = ["Attempts", "RetryOn", "RetryPlan", "run_async", "run_sync", "to_retry_predicate"]

T = TypeVar("T")

RetryOn: TypeAlias = (
    type[BaseException] | tuple[type[BaseException], ...] | Callable[[BaseException], bool]
)
"""Exception classes to retry, or a predicate such as ``closedloop.execution.RetryIf``."""


def to_retry_predicate(retry_on: RetryOn | None) -> Callable[[BaseException], bool]:
    """Normalise ``retry_on``; ``None`` is ``RetryIfException()`` (no programming errors)."""
    if retry_on is None:
        return RetryIfException()
    if isinstance(retry_on, type | tuple):
        types = retry_on if isinstance(retry_on, tuple) else (retry_on,)
        return RetryIfException(*types)
    if callable(retry_on):
        return retry_on
    raise ConfigurationError(
        "retry_on", retry_on, "must be exception classes or a predicate on the exception"
    )


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

    def _after_result(
        self, key: str, call: int, attempt: int, result: Any, invocation: Invocation, start: float
    ) -> tuple[ControlRecord, bool]:
        latency = self.clock() - start
        error, note = check_error(self.sensor(result, invocation))
        failed = error > self.retry_above
        record = self.loop.update(
            key,
            error,
            call=call,
            attempt=attempt,
            failed=failed,
            latency_s=latency,
            note=note,
        )
        return record, failed and self._may_retry(record, attempt)

    def _after_exception(
        self, key: str, call: int, attempt: int, exc: BaseException, start: float
    ) -> tuple[ControlRecord, bool]:
        latency = self.clock() - start
        record = self.loop.update(
            key,
            EXCEPTION_ERROR,
            call=call,
            attempt=attempt,
            failed=True,
            exception=f"{type(exc).__name__}: {exc}",
            latency_s=latency,
        )
        return record, self._may_retry(record, attempt)

    def _may_retry(self, record: ControlRecord, attempt: int) -> bool:
        # attempt − 1 retries are spent; the settings just produced decide the budget.
        return attempt <= record.settings.max_retries and attempt < self.max_attempts

    def _retryable(self, exc: BaseException) -> bool:
        return isinstance(exc, Exception) and bool(self.retry_if(exc))


def run_sync(
    plan: RetryPlan,
    key: str,
    invocation: Invocation,
    attempt_fn: Callable[[ControlContext], T],
    sleep: Callable[[float], object],
) -> Attempts[T]:
    """Run ``attempt_fn`` under the controller, retrying synchronously."""
    call = plan.loop.begin_call()
    records: list[ControlRecord] = []
    attempt = 0
    while True:
        attempt += 1
        ctx = plan.loop.context(key, attempt)
        start = plan.clock()
        try:
            result = attempt_fn(ctx)
        except BaseException as exc:
            if not plan._retryable(exc):
                raise
            record, again = plan._after_exception(key, call, attempt, exc, start)
            records.append(record)
            if not again:
                raise
        else:
            record, again = plan._after_result(key, call, attempt, result, invocation, start)
            records.append(record)
            if not again:
                return Attempts(result, tuple(records))
        sleep(record.settings.retry_delay_ms / 1000.0)


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
    call = plan.loop.begin_call()
    records: list[ControlRecord] = []
    attempt = 0
    while True:
        attempt += 1
        ctx = plan.loop.context(key, attempt)
        start = plan.clock()
        try:
            if plan.enforce_timeout:
                async with asyncio.timeout(ctx.timeout_s):
                    result = await attempt_fn(ctx)
            else:
                result = await attempt_fn(ctx)
        except BaseException as exc:
            if not plan._retryable(exc):
                raise
            record, again = plan._after_exception(key, call, attempt, exc, start)
            records.append(record)
            if not again:
                raise
        else:
            record, again = plan._after_result(key, call, attempt, result, invocation, start)
            records.append(record)
            if not again:
                return Attempts(result, tuple(records))
        await sleep(record.settings.retry_delay_ms / 1000.0)
