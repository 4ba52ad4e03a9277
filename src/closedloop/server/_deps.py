"""What every route shares: the :class:`Service`, and the key check in front of each call."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, Request

from .._exceptions import ConfigurationError, ModelNotAvailableError
from ..feedback import StateStore
from ..models import DEFAULT_MODEL, Model, load_model
from ._auth import ApiKeys, Principal
from ._http import ApiError
from ._metrics import ServiceMetrics
from ._provider import GatedTransport, ProviderLimits
from ._ratelimit import RateLimiter, retry_after_header
from ._readiness import model_problem_at_start
from ._registry import AgentRegistry
from ._run_records import RUNS
from ._runs import RunManager
from ._scoped import ScopedStore
from ._settings import ServerSettings
from ._sse import RunHub
from ._takeover import Dispatcher

__all__ = ["SESSIONS", "Service", "authenticate", "expired", "service_of"]

SESSIONS = "sessions"
"""The record namespace of sessions (in each key's scope)."""


def expired(session: dict[str, object], now: float) -> bool:
    """Whether a session record is past its ``expires_at``."""
    at = session.get("expires_at")
    return isinstance(at, int | float) and now >= at


@dataclass
class Service:
    """What the routes share: the store, keys, limiter, runs, metrics (``app.state.service``)."""

    settings: ServerSettings
    store: StateStore
    owns_store: bool
    registry: AgentRegistry
    keys: ApiKeys
    limiter: RateLimiter
    metrics: ServiceMetrics
    hub: RunHub
    runs: RunManager
    _model: Model | None = field(default=None, repr=False)
    dispatcher: Dispatcher | None = None
    limits: ProviderLimits | None = None
    tool_limits: ProviderLimits | None = None
    tool_transport: GatedTransport | None = None

    def scoped(self, principal: Principal) -> ScopedStore:
        """The caller's own view of the store."""
        return ScopedStore(self.store, principal.scope)

    def store_of(self, scope: str) -> StateStore:
        """The view of the store a key scope has (the shared store for ``""``)."""
        return ScopedStore(self.store, scope) if scope else self.store

    def model(self) -> Model:
        """The model agents run on (loaded once, at the first run)."""
        if self._model is None:
            chosen = self.settings.model
            spec = chosen if isinstance(chosen, str) else f"local:{DEFAULT_MODEL}"
            try:
                self._model = load_model(spec)
            except ConfigurationError as exc:
                # The service's setup, not the caller's request: 503, never 422.
                problem = model_problem_at_start(spec)
                detail = problem.detail if not problem.ok else f"{spec}: {exc.reason}"
                raise ModelNotAvailableError(detail) from None
            if self.limits is not None:
                self._model = self.limits.wrap(self._model)
        return self._model

    async def collect_garbage(self) -> int:
        """Drop expired sessions (with their runs) of every key, and expired store entries."""
        dropped = 0
        now = self.settings.wall_clock()
        for key in await self.keys.list():
            store = self.scoped(Principal(key_id=key.key_id, name=key.name))
            for record in await store.record_list(SESSIONS):
                if expired(record.to_dict(), now):
                    for run in await store.record_list(RUNS, f"{record.key}/"):
                        await self.runs.delete_run(store, run)
                    await store.record_delete(SESSIONS, record.key)
                    dropped += 1
        await self.store.gc()
        return dropped


async def service_of(request: Request) -> Service:
    """The app's :class:`Service`."""
    # A coroutine, though it awaits nothing: FastAPI runs a plain function dependency on
    # its thread pool, a thread hop on every request for one attribute read.
    service: Service = request.app.state.service
    return service


async def authenticate(
    request: Request, service: Annotated[Service, Depends(service_of)]
) -> Principal:
    """The bearer key's principal; 401 without a valid key, 429 over the key's rate."""
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if not header:
        service.metrics.auth_failures.labels("missing").inc()
        raise ApiError(
            401,
            "unauthorized",
            "missing API key: send Authorization: Bearer <key>",
            {"WWW-Authenticate": "Bearer"},
        )
    principal = await service.keys.verify(token.strip()) if scheme.lower() == "bearer" else None
    if principal is None:
        service.metrics.auth_failures.labels("invalid").inc()
        raise ApiError(401, "unauthorized", "invalid API key", {"WWW-Authenticate": "Bearer"})
    wait = service.limiter.check(principal.key_id)
    if wait > 0:
        service.metrics.rate_limited.inc()
        raise ApiError(
            429,
            "rate_limited",
            f"rate limit of this key reached; retry in {wait:.2f} s",
            {"Retry-After": retry_after_header(wait)},
        )
    return principal
