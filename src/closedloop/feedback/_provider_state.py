"""One provider's limiter state, shared by every session of a process or every worker.

An :class:`~closedloop.execution.AdmissionGate` keeps the permits it hands out, the
Retry-After it was told, the retry budget and the circuit breaker of its provider here:

- :class:`MemoryProviderState`: in-process, for one worker (the default).
- :class:`RedisProviderState`: in Redis, so N workers share one limit: a permit is taken
  by an atomic script (``_provider_scripts.py``) that admits only while fewer than the
  limit are held, so the total in flight across workers never exceeds it. Permits carry a
  lease: a worker that dies without releasing frees its permits when the lease ends.

The limit itself is computed by each worker's limiter (``closedloop.control``) and
published here; every worker's gate enforces the one last published. The breaker counts
only errors and timeouts (a 429 says the provider is alive and busy: that is the limiter's
and the cooldown's business), opens after ``failure_threshold`` in a row for
``recovery_s``, then lets one probe through (half-open). The retry budget is Finagle's
(SRE book ch. 22): first attempts deposit ``ratio``, time refills ``min_per_s``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from .._exceptions import ConfigurationError
from .._validation import require_int_at_least, require_non_negative, require_positive
from ._provider_scripts import ACQUIRE, BUDGET, RELEASE, SNAPSHOT
from ._redis_client import call_redis, connect, encodable
from ._redis_scripts import redact_url

if TYPE_CHECKING:
    from redis.asyncio import Redis
    from redis.commands.core import AsyncScript

__all__ = ["Admission", "MemoryProviderState", "ProviderSnapshot", "RedisProviderState"]

_T = TypeVar("_T")
Breaker = Literal["closed", "open", "half_open"]


@dataclass(frozen=True)
class Admission:
    """The answer to a permit request: ``ok`` (``value`` = in flight with it), ``full``
    (``value`` = in flight), ``cooldown`` or ``open`` (``value`` = seconds to wait)."""

    verdict: Literal["ok", "full", "cooldown", "open"]
    value: float


@dataclass(frozen=True)
class ProviderSnapshot:
    """What ``/metrics`` shows of a provider: limit, permits, refusals, budget, breaker."""

    limit: float | None
    inflight: int
    rejected: int
    retry_tokens: float
    breaker: Breaker
    times_opened: int
    cooldown_s: float


@dataclass(frozen=True)
class _Rules:
    failure_threshold: int
    recovery_s: float
    lease_s: float
    budget_ratio: float
    budget_per_s: float
    budget_cap: float


def _rules(**values: Any) -> _Rules:
    return _Rules(
        failure_threshold=require_int_at_least("failure_threshold", values["failure_threshold"], 1),
        recovery_s=require_positive("recovery_s", values["recovery_s"]),
        lease_s=require_positive("lease_s", values["lease_s"]),
        budget_ratio=require_non_negative("budget_ratio", values["budget_ratio"]),
        budget_per_s=require_non_negative("budget_per_s", values["budget_per_s"]),
        budget_cap=require_positive("budget_cap", values["budget_cap"]),
    )


_DEFAULTS: dict[str, Any] = {
    "failure_threshold": 5,
    "recovery_s": 30.0,
    "lease_s": 600.0,
    "budget_ratio": 0.1,
    "budget_per_s": 1.0,
    "budget_cap": 20.0,
}


class MemoryProviderState:
    """In-process provider state (one worker); the same verdicts as the Redis one."""

    def __init__(self, **rules: Any) -> None:
        self.rules = _rules(**{**_DEFAULTS, **rules})
        self._held: dict[str, float] = {}
        self._limit: float | None = None
        self._until = 0.0
        self._tokens = self.rules.budget_cap
        self._tlast: float | None = None
        self._breaker: Breaker = "closed"
        self._open_until = 0.0
        self._failures = self._opened = self._rejected = 0

    def _expire(self, now: float) -> None:
        for holder in [h for h, until in self._held.items() if until <= now]:
            del self._held[holder]

    async def acquire(self, holder: str, limit: float, now: float) -> Admission:
        """Take a permit for ``holder`` if fewer than the (published, else ``limit``) are held."""
        self._expire(now)
        if self._until > now:
            return Admission("cooldown", self._until - now)
        if self._breaker == "open":
            if now < self._open_until:
                return Admission("open", self._open_until - now)
            self._breaker = "half_open"
        cap = 1 if self._breaker == "half_open" else max(1, int(self._limit or limit))
        if len(self._held) >= cap:
            return Admission("full", len(self._held))
        self._held[holder] = now + self.rules.lease_s
        return Admission("ok", len(self._held))

    async def release(
        self, holder: str, now: float, outcome: str, retry_after_s: float | None = None
    ) -> None:
        """Give a permit back with its attempt's outcome (``ok``, ``rejected``, ...)."""
        if self._held.pop(holder, None) is None:
            return
        if retry_after_s:
            self._until = max(self._until, now + retry_after_s)
        if outcome in ("ok", "rejected"):
            self._rejected += outcome == "rejected"
            self._failures = 0
            if self._breaker == "half_open":
                self._breaker = "closed"
            return
        self._failures += 1
        if self._breaker == "half_open" or self._failures >= self.rules.failure_threshold:
            self._breaker, self._failures = "open", 0
            self._open_until = now + self.rules.recovery_s
            self._opened += 1

    async def publish_limit(self, limit: float) -> None:
        """The limit every gate on this state enforces from now on."""
        self._limit = float(limit)

    async def budget(self, now: float, op: Literal["deposit", "take", "read"]) -> bool:
        """Deposit (a first attempt), take (a retry; False if none is left) or read."""
        r = self.rules
        last = now if self._tlast is None else self._tlast
        if now > last:
            self._tokens = min(r.budget_cap, self._tokens + (now - last) * r.budget_per_s)
            last = now
        self._tlast = last
        if op == "deposit":
            self._tokens = min(r.budget_cap, self._tokens + r.budget_ratio)
        elif op == "take" and self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False

    async def snapshot(self, now: float) -> ProviderSnapshot:
        """The state at ``now``."""
        self._expire(now)
        await self.budget(now, "read")
        return ProviderSnapshot(
            limit=self._limit,
            inflight=len(self._held),
            rejected=self._rejected,
            retry_tokens=self._tokens,
            breaker=self._breaker,
            times_opened=self._opened,
            cooldown_s=max(0.0, self._until - now),
        )


class RedisProviderState:
    """Provider state in Redis, shared by every worker that names the same ``provider``.

    ``url`` is a redis:// URL; keys live under ``{prefix}:p:<provider>``. The rules are
    each worker's own and should agree across workers (the lease, the breaker's threshold
    and recovery, the retry budget's ratio, refill and cap).
    """

    def __init__(
        self,
        url: str,
        provider: str,
        *,
        prefix: str = "closedloop",
        socket_timeout_s: float = 5.0,
        connect_timeout_s: float = 2.0,
        **rules: Any,
    ) -> None:
        if not isinstance(url, str) or not url.startswith(("redis://", "rediss://", "unix://")):
            raise ConfigurationError(
                "url", url, "must be a redis://, rediss:// or unix:// URL string"
            )
        if not isinstance(provider, str) or not provider or "{" in provider or "}" in provider:
            raise ConfigurationError("provider", provider, "must be a non-empty name, no braces")
        self.rules = _rules(**{**_DEFAULTS, **rules})
        self._client, self._new_client = connect(
            url, socket_timeout_s=socket_timeout_s, connect_timeout_s=connect_timeout_s
        )
        self._where = redact_url(url)
        tag = "{" + encodable("prefix", prefix) + ":p:" + encodable("provider", provider) + "}"
        self._keys = [f"{tag}:held", f"{tag}:state"]
        self._loop: asyncio.AbstractEventLoop | None = None
        register = self._client.register_script
        self._acquire: AsyncScript = register(ACQUIRE)
        self._release: AsyncScript = register(RELEASE)
        self._budget: AsyncScript = register(BUDGET)
        self._snapshot: AsyncScript = register(SNAPSHOT)
        self._closed = False

    def __repr__(self) -> str:
        return f"RedisProviderState({self._where!r}, keys={self._keys[1]!r})"

    def _redis(self) -> Redis:
        loop = asyncio.get_running_loop()  # redis-py's connections belong to their loop
        if self._loop is not loop:
            if self._loop is not None:
                self._client = self._new_client()
            self._loop = loop
        return self._client

    async def _run(self, what: str, script: AsyncScript, keys: list[str], args: list[str]) -> Any:
        call: Callable[[], Awaitable[Any]] = lambda: script(  # noqa: E731
            keys=keys, args=args, client=self._redis()
        )
        result, _ = await call_redis(
            call, what=what, where=self._where, closed=lambda: self._closed
        )
        return result

    async def acquire(self, holder: str, limit: float, now: float) -> Admission:
        """As :meth:`MemoryProviderState.acquire`, atomically across workers."""
        args = [holder, repr(now), repr(float(limit)), repr(now + self.rules.lease_s)]
        verdict, value = await self._run("acquire", self._acquire, self._keys, args)
        return Admission(verdict, float(value))

    async def release(
        self, holder: str, now: float, outcome: str, retry_after_s: float | None = None
    ) -> None:
        """As :meth:`MemoryProviderState.release`; a release sent twice counts once."""
        r = self.rules
        after = repr(float(retry_after_s)) if retry_after_s else ""
        args = [holder, repr(now), outcome, after, str(r.failure_threshold), repr(r.recovery_s)]
        await self._run("release", self._release, self._keys, args)

    async def publish_limit(self, limit: float) -> None:
        """The limit every worker's gate enforces from now on."""

        async def write() -> Any:
            return await self._redis().hset(self._keys[1], "limit", repr(float(limit)))

        await call_redis(write, what="publish limit", where=self._where, closed=lambda: False)

    async def budget(self, now: float, op: Literal["deposit", "take", "read"]) -> bool:
        """As :meth:`MemoryProviderState.budget`, one balance for all workers."""
        r = self.rules
        args = [repr(now), op, repr(r.budget_ratio), repr(r.budget_per_s), repr(r.budget_cap)]
        _, took = await self._run("retry budget", self._budget, self._keys[1:], args)
        return bool(took == "1")

    async def snapshot(self, now: float) -> ProviderSnapshot:
        """The shared state at ``now``."""
        await self.budget(now, "read")
        raw = await self._run("snapshot", self._snapshot, self._keys, [repr(now)])
        fields = dict(zip(raw[1::2], raw[2::2], strict=True))
        breaker = fields.get("breaker", "closed")
        if breaker == "open" and now >= float(fields.get("open_until", "0")):
            breaker = "half_open"
        return ProviderSnapshot(
            limit=float(fields["limit"]) if "limit" in fields else None,
            inflight=int(raw[0]),
            rejected=int(fields.get("rejected", "0")),
            retry_tokens=float(fields.get("tokens", repr(self.rules.budget_cap))),
            breaker=breaker if breaker in ("closed", "open", "half_open") else "closed",
            times_opened=int(fields.get("opened", "0")),
            cooldown_s=max(0.0, float(fields.get("until", "0")) - now),
        )

    async def clear(self) -> None:
        """Forget this provider's state (tests, a provider replaced)."""

        async def drop() -> Any:
            return await self._redis().delete(*self._keys)

        await call_redis(drop, what="clear", where=self._where, closed=lambda: self._closed)

    async def close(self) -> None:
        """Close the connections."""
        self._closed = True
        await self._client.aclose()
