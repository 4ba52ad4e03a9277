"""``GatedModel``: every call to a model through an admission gate shared by its callers.

Each attempt takes a permit from the gate (``closedloop.execution.AdmissionGate``: a
concurrency limit moved by an adaptive limiter, Retry-After honoured for every caller,
client-side throttling, a shared circuit breaker) and reports how it went: ``ok``,
``rejected`` (429, or a 5xx the server meant as "busy"), ``timeout`` or ``error`` (the
server could not be reached). A refused or timed-out attempt is tried again, at most
``max_attempts`` in all, and only while the gate's retry budget holds a retry (Finagle's
``RetryBudget``; Google SRE book, ch. 22): retries stay a bounded share of first
attempts, so a dip in capacity cannot become a retry storm. The wait before a retry is
the provider's Retry-After, which the gate applies to every caller, not a fixed backoff.
The attempts run on the library's one retry driver (``closedloop.policy.retry_async``);
the budget's grant, an awaited question to the gate, is asked by the attempt itself.

Failures that say nothing about the provider's capacity (a refused key, a bad request,
an answer that does not parse) are passed through at once, and count for the limiter
as answered calls.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from .._exceptions import (
    CircuitOpenError,
    ClosedLoopError,
    ConfigurationError,
    ModelError,
    ModelRateLimitError,
    ModelTimeoutError,
    ModelUnreachableError,
    TransientModelError,
)
from .._policy import RetryPolicy, retry_if_result, stop_never
from .._policy_state import PolicyDecision, PolicyState
from .._retrying import retry_async
from .._wait import wait_fact
from ._completion import Completion, MessagesInput
from ._protocol import Model
from ._request import DEFAULT_REQUEST, ModelRequest
from ._wrapper import WrapperModel

__all__ = ["GatedModel"]


_Outcome = Literal["ok", "rejected", "timeout", "error"]


class _Permit(Protocol):
    def outcome(self, result: _Outcome, *, retry_after_s: float | None = None) -> None: ...


class _Gate(Protocol):
    def permit(self) -> AbstractAsyncContextManager[_Permit]: ...

    async def first_attempt(self) -> None: ...

    async def may_retry(self) -> bool: ...


def _classify(exc: ModelError) -> tuple[_Outcome, float | None] | None:
    """The attempt's outcome for the limiter, or None for a failure not about capacity."""
    if isinstance(exc, ModelRateLimitError):
        return "rejected", exc.retry_after
    if isinstance(exc, TransientModelError):
        return "rejected", None
    if isinstance(exc, ModelTimeoutError):
        return "timeout", None
    if isinstance(exc, ModelUnreachableError):
        return "error", None
    return None


@dataclass(frozen=True)
class _Failed:
    """An attempt refused for capacity, and whether the retry budget granted another."""

    error: ModelError
    granted: bool


class GatedModel(WrapperModel):
    """Wraps ``inner``; ``gate`` is shared by every session that calls the same provider."""

    def __init__(
        self,
        inner: Model,
        gate: _Gate,
        *,
        max_attempts: int = 3,
        retry_wait_s: float = 0.5,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        super().__init__(inner)
        if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
            raise ConfigurationError("max_attempts", max_attempts, "must be an integer >= 1")
        if not retry_wait_s >= 0:
            raise ConfigurationError("retry_wait_s", retry_wait_s, "must be >= 0")
        self.gate = gate
        self.max_attempts = max_attempts
        self.retry_wait_s = retry_wait_s
        self._sleep = sleep
        self.retries = 0
        # Retry a capacity failure the budget granted; the attempts cap is in the grant.
        self._policy = RetryPolicy(
            stop=stop_never(),
            wait=wait_fact("pause_s"),
            retry=retry_if_result(lambda answer: isinstance(answer, _Failed) and answer.granted),
        )

    async def complete(
        self, messages: MessagesInput, request: ModelRequest = DEFAULT_REQUEST
    ) -> Completion:
        """The wrapped model's answer, each attempt through the gate."""
        await self.gate.first_attempt()

        async def attempt(n: int) -> Completion | _Failed:
            answer = await self._attempt(messages, request)
            if isinstance(answer, Completion):
                return answer
            # The shared budget is asked only for a retry the attempts still allow.
            return _Failed(answer, n < self.max_attempts and await self.gate.may_retry())

        def count(state: PolicyState, decision: PolicyDecision) -> None:
            self.retries += 1

        done = await retry_async(
            attempt,
            self._policy,
            sleep=self._pause,
            observe=self._observe,
            before_sleep=count,
        )
        answer = done.unwrap()  # a failure not about capacity was raised: raised again
        if isinstance(answer, _Failed):
            raise answer.error
        return answer

    def _observe(self, attempt: int, answer: Any, error: BaseException | None) -> dict[str, float]:
        # A 429 names its Retry-After, which the gate applies to every caller: no pause of
        # our own then. Otherwise a short pause, doubled per attempt.
        failure = answer.error if isinstance(answer, _Failed) else None
        named = isinstance(failure, ModelRateLimitError) and failure.retry_after is not None
        return {"pause_s": 0.0 if named else self.retry_wait_s * 2 ** (attempt - 1)}

    async def _pause(self, seconds: float) -> None:
        if seconds > 0:  # no pause at all where the gate does the waiting
            await self._sleep(seconds)

    async def _attempt(
        self, messages: MessagesInput, request: ModelRequest
    ) -> Completion | ModelError:
        entered = False
        try:
            async with self.gate.permit() as permit:
                entered = True
                try:
                    completion = await self.inner.complete(messages, request)
                except ModelError as exc:
                    verdict = _classify(exc)
                    if verdict is None:
                        permit.outcome("ok")  # the provider answered; not a capacity signal
                    else:
                        permit.outcome(verdict[0], retry_after_s=verdict[1])
                    if verdict is None or isinstance(exc, ModelUnreachableError):
                        raise
                    return exc
                permit.outcome("ok")
                return completion
        except CircuitOpenError as exc:
            if entered:
                raise
            raise ModelUnreachableError(f"{self.name}: {exc}") from exc
        except ClosedLoopError as exc:
            if entered:
                raise
            # Refused locally by client-side throttling: to the caller, a rate limit.
            raise ModelRateLimitError(f"{self.name}: {exc}") from exc
