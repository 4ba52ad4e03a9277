"""The service's limiters on the path to its model: one admission gate per provider.

Every run of the service calls its model through one :class:`~closedloop.models.GatedModel`
whose gate holds the PID-on-queueing-delay limiter (``closedloop.control``), client-side
throttling (SRE, K = 2), Retry-After for every caller, a retry budget and a circuit
breaker. With several workers the gate's state is in Redis (the queue's URL, else the
store's when it is Redis, else ``provider_state``), so the workers share one limit, one
budget and one breaker; otherwise it is in-process. ``/metrics`` and ``/v1/limits`` show
it, and the dashboard reads ``/v1/limits``.

Tools go through a gate of their own (provider ``tools``): :class:`GatedTransport` is an
``httpx`` transport that takes a permit for every request to the world the reference
agents call and reports 429/503 (with Retry-After), timeouts and connection failures. A
refusal by the gate itself (throttled, breaker open) reaches the tool as a connection
error, which the tool reports as the source being unreachable. The permit is held until
the response's headers arrive, not while its body is read.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from .._exceptions import ClosedLoopError
from ..control import ClientThrottle, DelayPIDLimiter, ThrottleConfig
from ..execution import AdmissionGate
from ..feedback import MemoryProviderState, RedisProviderState
from ..models import GatedModel, Model

__all__ = ["GatedTransport", "ProviderLimits", "provider_limits"]

_REDIS = ("redis://", "rediss://", "unix://")
_MIN_REQUESTS = 20  # a minute with fewer calls than this is not evidence enough to refuse


@dataclass
class ProviderLimits:
    """One provider's gate, its limiter and where their shared state lives."""

    name: str
    gate: AdmissionGate
    limiter: DelayPIDLimiter
    state: MemoryProviderState | RedisProviderState
    clock: Callable[[], float]

    def wrap(self, model: Model) -> Model:
        """``model`` with every attempt through this gate (a model already gated is kept)."""
        return model if isinstance(model, GatedModel) else GatedModel(model, self.gate)

    async def snapshot(self) -> dict[str, Any]:
        """What ``/metrics`` and ``/v1/limits`` show (the shared figures across workers)."""
        now = self.clock()
        snap = await self.state.snapshot(now)
        self.limiter.poll(now)
        return {
            "provider": self.name,
            "shared": isinstance(self.state, RedisProviderState),
            "limit": snap.limit if snap.limit is not None else self.limiter.limit,
            "inflight": snap.inflight,
            "inflight_here": self.gate.inflight,
            "rejected": snap.rejected,
            "rejected_here": self.gate.rejected,
            "retry_tokens": snap.retry_tokens,
            "breaker": snap.breaker,
            "times_opened": snap.times_opened,
            "cooldown_s": snap.cooldown_s,
            "delay_ratio": self.limiter.delay_ratio,
            "congested": self.limiter.congested,
            "capacity_deficit": self.limiter.deficit.estimate,
        }

    async def close(self) -> None:
        """Close the Redis connections, if any."""
        if isinstance(self.state, RedisProviderState):
            await self.state.close()


def provider_limits(
    *,
    enabled: bool,
    url: str | None,
    name: str = "model",
    clock: Callable[[], float],
    sleep: Callable[[float], Any] = asyncio.sleep,
) -> ProviderLimits | None:
    """The gate for the service's model, or None when the limiters are switched off.

    ``clock`` must be the same for every worker when ``url`` is set (the wall clock): the
    permits' leases, the breaker and the Retry-After are instants every worker compares.
    """
    if not enabled:
        return None
    state: MemoryProviderState | RedisProviderState
    if url is not None and url.startswith(_REDIS):
        state = RedisProviderState(url, name)
    else:
        state = MemoryProviderState()
    limiter = DelayPIDLimiter(start=clock())  # windows on this clock, not from 0
    gate = AdmissionGate(
        limiter,
        throttle=ClientThrottle(ThrottleConfig(min_requests=_MIN_REQUESTS)),
        state=state,
        clock=clock,
        sleep=sleep,
    )
    return ProviderLimits(name, gate, limiter, state, clock)


def _retry_after_s(response: httpx.Response) -> float | None:
    for header, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        raw = response.headers.get(header)
        if raw:
            try:
                return max(0.0, float(raw) / scale)
            except ValueError:
                continue  # an HTTP date: the cooldown waits for the next 429 instead
    return None


class GatedTransport(httpx.AsyncBaseTransport):
    """Every request through ``limits``' gate, then on to ``inner`` (a plain HTTP transport)."""

    def __init__(
        self, limits: ProviderLimits, inner: httpx.AsyncBaseTransport | None = None
    ) -> None:
        self.limits = limits
        self.inner = inner if inner is not None else httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        try:
            async with self.limits.gate.permit() as permit:
                try:
                    response = await self.inner.handle_async_request(request)
                except httpx.TimeoutException:
                    permit.outcome("timeout")
                    raise
                except httpx.TransportError:
                    permit.outcome("error")
                    raise
                if response.status_code in (429, 503):
                    permit.outcome("rejected", retry_after_s=_retry_after_s(response))
                elif response.status_code >= 500:
                    permit.outcome("error")
                else:
                    permit.outcome("ok")
                return response
        except ClosedLoopError as exc:  # refused by the gate before any request was sent
            raise httpx.ConnectError(f"{self.limits.name}: {exc}", request=request) from exc

    async def aclose(self) -> None:
        """Nothing: every run's client closes its transport, and this one is shared by all
        runs; the service calls :meth:`close` at shutdown."""

    async def close(self) -> None:
        """Close the connections (the service, at shutdown)."""
        await self.inner.aclose()
