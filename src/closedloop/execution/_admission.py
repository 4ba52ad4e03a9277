"""The execution side of adaptive concurrency: a permit gate an async client calls through.

A model or tool client wraps each attempt in ``async with gate.permit() as permit:`` and
reports ``permit.outcome(...)``; the gate holds callers while the in-flight count is at
the limiter's limit or a Retry-After is pending, hands the finished attempt (latency on
the injected clock, outcome, in-flight) to the limiter, and refuses locally, as client-side
throttling does, by raising :class:`Throttled`. The numerics stay in ``control/``: the gate
sees the limiter, throttle and cooldown only through the small protocols below.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Literal, Protocol

from .._exceptions import ClosedLoopError

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


class Throttled(ClosedLoopError):
    """Refused locally: the provider has been refusing most calls (client-side throttling)."""


@dataclass
class Permit:
    """One admitted attempt; set its outcome before the ``async with`` block ends."""

    sent: float
    inflight: int
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
        clock: Callable[[], float],
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        draw: Callable[[], float] = random.random,
    ) -> None:
        self.limiter, self.throttle, self.cooldown = limiter, throttle, cooldown
        self._clock, self._sleep, self._draw = clock, sleep, draw
        self.inflight = 0
        self._changed = asyncio.Condition()

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
        await self._admit()
        self.inflight += 1
        permit = Permit(sent=self._clock(), inflight=self.inflight)
        try:
            yield permit
        finally:  # an exception leaves the outcome the caller set, "error" by default
            self.inflight -= 1
            now = self._clock()
            self.limiter.record(now, now - permit.sent, permit.result, permit.inflight)
            if self.throttle:
                self.throttle.record(now, accepted=permit.result != "rejected")
            if self.cooldown and permit.retry_after_s:
                self.cooldown.honour(now, permit.retry_after_s)
            async with self._changed:
                self._changed.notify_all()
