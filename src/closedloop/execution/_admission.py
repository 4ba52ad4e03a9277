"""The execution side of adaptive concurrency: a permit gate an async client calls through.

A model or tool client wraps each attempt in ``async with gate.permit() as permit:`` and
reports ``permit.outcome(...)``; the gate holds callers while the in-flight count is at
the limiter's limit or a Retry-After is pending, hands the finished attempt (latency on
the injected clock, outcome, in-flight) to the limiter, and refuses locally, as client-side
throttling does, by raising :class:`Throttled`. The numerics stay in ``control/``: the gate
sees the limiter, throttle and cooldown only through the small protocols below.

With ``state`` (a ``closedloop.feedback`` provider state: in-process, or Redis for several
workers) the permits, the Retry-After, the retry budget and the circuit breaker live
there instead: a permit is taken atomically against the limit last published by any
worker's limiter, so N workers together never hold more permits than the limit. An open
breaker refuses with :class:`~closedloop.CircuitOpenError`. Without ``state`` the gate
counts in-flight itself (one process).
"""

from __future__ import annotations

import asyncio
import itertools
import random
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Literal, Protocol

from .._exceptions import CircuitOpenError, ClosedLoopError, ConfigurationError

__all__ = ["AdmissionGate", "Permit", "Throttled"]

# The same four outcomes as ``closedloop.control.Outcome`` (execution does not import control).
_Outcome = Literal["ok", "rejected", "timeout", "error"]


class _Limiter(Protocol):
    limit: float

    def record(self, now: float, latency_s: float, outcome: _Outcome, inflight: int) -> float: ...

    def poll(self, now: float) -> float: ...


class _Throttle(Protocol):
    def record(self, now: float, *, accepted: bool) -> None: ...

    def should_reject(self, now: float, draw: float) -> bool: ...


class _Cooldown(Protocol):
    def honour(self, now: float, retry_after_s: float) -> None: ...

    def wait_s(self, now: float) -> float: ...


class _Admission(Protocol):
    @property
    def verdict(self) -> Literal["ok", "full", "cooldown", "open"]: ...

    @property
    def value(self) -> float: ...


class _State(Protocol):
    async def acquire(self, holder: str, limit: float, now: float) -> _Admission: ...

    async def release(
        self, holder: str, now: float, outcome: str, retry_after_s: float | None = None
    ) -> None: ...

    async def publish_limit(self, limit: float) -> None: ...

    async def budget(self, now: float, op: Literal["deposit", "take", "read"]) -> bool: ...


class _Budget(Protocol):
    def on_first_attempt(self, now: float) -> None: ...

    def try_retry(self, now: float) -> bool: ...


class Throttled(ClosedLoopError):
    """Refused locally: the provider has been refusing most calls (client-side throttling)."""


@dataclass
class Permit:
    """One admitted attempt; set its outcome before the ``async with`` block ends."""

    sent: float
    inflight: int
    holder: str = ""
    result: _Outcome = "error"
    retry_after_s: float | None = field(default=None)

    def outcome(self, result: _Outcome, *, retry_after_s: float | None = None) -> None:
        """``ok``, ``rejected`` (429/503; with the provider's Retry-After), ``timeout``, ``error``."""
        self.result = result
        self.retry_after_s = retry_after_s


class AdmissionGate:
    """Shared by every session of a process that calls one provider."""

    def __init__(
        self,
        limiter: _Limiter,
        *,
        throttle: _Throttle | None = None,
        cooldown: _Cooldown | None = None,
        budget: _Budget | None = None,
        state: _State | None = None,
        clock: Callable[[], float],
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        draw: Callable[[], float] = random.random,
        poll_s: float = 0.02,
    ) -> None:
        self.limiter, self.throttle, self.cooldown = limiter, throttle, cooldown
        self.budget, self.state = budget, state
        self._clock, self._sleep, self._draw = clock, sleep, draw
        self.poll_s = poll_s
        self.inflight = 0
        self.rejected = 0
        self._changed = asyncio.Condition()
        self._published: float | None = None
        self._me = uuid.uuid4().hex[:12]
        self._serial = itertools.count()

    async def first_attempt(self) -> None:
        """A new request (not a retry) is about to be sent: the retry budget's deposit."""
        now = self._clock()
        if self.state is not None:
            await self.state.budget(now, "deposit")
        elif self.budget is not None:
            self.budget.on_first_attempt(now)

    async def may_retry(self) -> bool:
        """Whether the retry budget holds a retry (and takes it); True with no budget."""
        now = self._clock()
        if self.state is not None:
            return await self.state.budget(now, "take")
        return self.budget.try_retry(now) if self.budget is not None else True

    async def _ask(self, state: _State, holder: str) -> _Admission:
        now = self._clock()
        return await state.acquire(holder, self.limiter.poll(now), now)

    async def _admit_shared(self, state: _State, holder: str) -> int:
        while True:
            answer = await self._ask(state, holder)
            if answer.verdict == "ok":
                return int(answer.value)
            if answer.verdict == "open":
                raise CircuitOpenError(
                    f"the provider's circuit breaker is open; retry in {answer.value:.1f} s"
                )
            if answer.verdict == "cooldown":
                await self._sleep(answer.value)
            else:  # woken by a release here, or after poll_s for one by another worker
                await self._wait_freed()

    async def _wait_freed(self) -> None:
        async def released() -> None:
            async with self._changed:
                await self._changed.wait()

        waits = {asyncio.ensure_future(released()), asyncio.ensure_future(self._sleep(self.poll_s))}
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()

    async def _admit(self) -> None:
        while True:
            now = self._clock()
            wait = self.cooldown.wait_s(now) if self.cooldown else 0.0
            if wait > 0:
                await self._sleep(wait)  # Retry-After names a time: no point waking sooner
                continue
            if self.inflight < max(1, int(self.limiter.poll(now))):
                return
            async with self._changed:
                await self._changed.wait()

    @asynccontextmanager
    async def permit(self) -> AsyncIterator[Permit]:
        """Wait for a permit, yield it, and record its outcome when the block ends."""
        if self.throttle and self.throttle.should_reject(self._clock(), self._draw()):
            raise Throttled("the provider refused most recent calls; refused locally")
        holder = self._holder()
        if self.state is not None:
            held = await self._admit_shared(self.state, holder)
        else:
            await self._admit()
            held = self.inflight + 1
        permit = self._enter(holder, held)
        try:
            yield permit
        finally:  # an exception leaves the outcome the caller set, "error" by default
            await self.leave(permit)

    async def try_enter(self) -> Permit | _Admission:
        """One try for a permit of the shared state, without waiting: the :class:`Permit`,
        or the state's refusal (``full``, ``cooldown`` or ``open``, with its value).

        For a driver that does its own waiting on its own clock (a discrete-event
        simulation of many callers); it must hand the permit back with :meth:`leave`.
        Client-side throttling is the caller's to ask (:attr:`throttle`).
        """
        if self.state is None:
            raise ConfigurationError("state", None, "try_enter needs a provider state")
        holder = self._holder()
        answer = await self._ask(self.state, holder)
        if answer.verdict != "ok":
            return answer
        return self._enter(holder, int(answer.value))

    async def leave(self, permit: Permit) -> None:
        """Hand ``permit`` back with the outcome set on it (``permit()`` does this itself)."""
        self.inflight -= 1
        await self._settle(permit)

    def _holder(self) -> str:
        return f"{self._me}:{next(self._serial)}"

    def _enter(self, holder: str, held: int) -> Permit:
        self.inflight += 1
        return Permit(sent=self._clock(), inflight=held, holder=holder)

    async def _settle(self, permit: Permit) -> None:
        now = self._clock()
        self.rejected += permit.result == "rejected"
        limit = self.limiter.record(now, now - permit.sent, permit.result, permit.inflight)
        if self.state is not None:
            await self.state.release(permit.holder, now, permit.result, permit.retry_after_s)
            if limit != self._published:
                self._published = limit
                await self.state.publish_limit(limit)
        else:
            if self.cooldown and permit.retry_after_s:
                self.cooldown.honour(now, permit.retry_after_s)
        if self.throttle:
            self.throttle.record(now, accepted=permit.result != "rejected")
        async with self._changed:
            self._changed.notify_all()
