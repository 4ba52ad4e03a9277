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

Failures that say nothing about the provider's capacity (a refused key, a bad request,
an answer that does not parse) are passed through at once, and count for the limiter
as answered calls.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Literal, Protocol

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

    async def complete(
        self, messages: MessagesInput, request: ModelRequest = DEFAULT_REQUEST
    ) -> Completion:
        """The wrapped model's answer, each attempt through the gate."""
        await self.gate.first_attempt()
        attempt = 0
        while True:
            attempt += 1
            failure = await self._attempt(messages, request)
            if isinstance(failure, Completion):
                return failure
            if attempt >= self.max_attempts or not await self.gate.may_retry():
                raise failure
            self.retries += 1
            # A 5xx names no Retry-After: a short pause, doubled per attempt.
            if not isinstance(failure, ModelRateLimitError) or failure.retry_after is None:
                await self._sleep(self.retry_wait_s * 2 ** (attempt - 1))

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
