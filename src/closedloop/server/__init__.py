"""The service: sessions and runs over HTTP, the human handover queue, a live dashboard.

``create_app(ServerSettings(...))`` builds the FastAPI app that ``closedloop serve`` runs
on uvicorn. Every request carries a bearer API key (``closedloop keys create``); each
key sees only its own sessions, runs and handovers, because everything it owns lives
under its own scope of the shared :class:`~closedloop.feedback.StateStore`. Agents come
from an :class:`AgentRegistry`: the reference agents, plus any registered in Python.
``/metrics`` serves Prometheus counters, ``/healthz`` the service's health, ``/`` the
dashboard (live e(t), u(t), f_est(t) and protocol level per run; the handover queue).
"""

from __future__ import annotations

from .._public import present_under
from . import _needs  # noqa: F401  (names the server extra when FastAPI is missing)
from ._app import create_app
from ._auth import KEY_NAMESPACE, ApiKeyInfo, ApiKeys, CreatedKey, Principal
from ._deps import Service
from ._metrics import ServiceMetrics
from ._ratelimit import RateLimit, RateLimiter, TokenBucket
from ._registry import (
    AGENT_ENTRY_POINT_GROUP,
    AgentContext,
    AgentFactory,
    AgentRegistry,
    AgentSpec,
    TaskBuilder,
    default_registry,
)
from ._runs import RunManager
from ._scoped import ScopedStore
from ._settings import ServerSettings, open_store
from ._sse import RunHub

__all__ = [
    "AGENT_ENTRY_POINT_GROUP",
    "KEY_NAMESPACE",
    "AgentContext",
    "AgentFactory",
    "AgentRegistry",
    "AgentSpec",
    "ApiKeyInfo",
    "ApiKeys",
    "CreatedKey",
    "Principal",
    "RateLimit",
    "RateLimiter",
    "RunHub",
    "RunManager",
    "ScopedStore",
    "ServerSettings",
    "Service",
    "ServiceMetrics",
    "TaskBuilder",
    "TokenBucket",
    "create_app",
    "default_registry",
    "open_store",
]

# Public names show as closedloop.server.X in reprs and docs (httpx does the same).
present_under(globals(), __all__, __name__)
