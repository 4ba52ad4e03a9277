"""The service's limiters on the path to its model: one admission gate per provider.

Every run of the service calls its model through one :class:`~closedloop.models.GatedModel`
whose gate holds the PID-on-queueing-delay limiter (``closedloop.control``), client-side
throttling (SRE, K = 2), Retry-After for every caller, a retry budget and a circuit
breaker. With several workers the gate's state is in Redis (the queue's URL, else the
store's when it is Redis, else ``provider_state``), so the workers share one limit, one
budget and one breaker; otherwise it is in-process. ``/metrics`` and ``/v1/limits`` show
it, and the dashboard reads ``/v1/limits``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..control import ClientThrottle, DelayPIDLimiter, ThrottleConfig
from ..execution import AdmissionGate
from ..feedback import MemoryProviderState, RedisProviderState
from ..models import GatedModel, Model

__all__ = ["ProviderLimits", "provider_limits"]

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
