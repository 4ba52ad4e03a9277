"""Several service processes behind one port: ``closedloop serve --workers N``.

uvicorn's own supervisor runs the workers: the parent binds the socket once and spawns N
fresh interpreters, each of which builds the app through :func:`app_from_environment`
(the settings travel in one environment variable, JSON). Every piece of state the API
promises lives in the shared store (sessions, runs, keys, task state, the effect ledger,
the handover queue), so a request may land on any worker; what stays per worker is the
in-flight asyncio tasks of the runs it started, the rate limiter's buckets and the
Prometheus counters (each worker's ``/metrics`` counts its own requests). Every response
names the process that served it in the ``X-Closedloop-Worker`` header.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .._exceptions import ConfigurationError
from ._ratelimit import RateLimit
from ._registry import default_registry
from ._settings import ServerSettings

__all__ = [
    "SETTINGS_ENV",
    "WORKER_HEADER",
    "WorkerHeaderMiddleware",
    "app_from_environment",
    "idempotent_task_id",
    "import_agent_hooks",
    "require_shared_store",
    "worker_environment",
]

SETTINGS_ENV = "CLOSEDLOOP_SERVE_SETTINGS"
WORKER_HEADER = "X-Closedloop-Worker"


def require_shared_store(store: str | None, workers: int) -> None:
    """Refuse a per-process store for more than one worker (each would see its own data)."""
    if workers > 1 and store is not None and store.startswith("memory:"):
        raise ConfigurationError(
            "store",
            store,
            f"lives in one process's memory; {workers} workers need a store they share: "
            "sqlite:///PATH or redis://HOST:PORT/DB",
        )


def worker_environment(
    *,
    store: str | None,
    model: str | None,
    world_url: str | None,
    rate_per_s: float,
    burst: int,
    runs_dir: Path | None,
    agents: Sequence[str],
    queue: str | None = None,
    takeover_after_s: float = 15.0,
) -> dict[str, str]:
    """The environment a worker builds its app from (see :func:`app_from_environment`)."""
    settings = {
        "store": store,
        "model": model,
        "world_url": world_url,
        "rate_per_s": rate_per_s,
        "burst": burst,
        "runs_dir": None if runs_dir is None else str(runs_dir),
        "agents": list(agents),
        "queue": queue,
        "takeover_after_s": takeover_after_s,
    }
    return {SETTINGS_ENV: json.dumps(settings)}


def import_agent_hooks(specs: Sequence[str]) -> None:
    """Import ``module`` or call ``module:function(default_registry())`` for each spec."""
    for spec in specs:
        module_name, _, attr = spec.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise ConfigurationError("agents", spec, f"cannot be imported: {exc}") from None
        if attr:
            hook = getattr(module, attr, None)
            if not callable(hook):
                raise ConfigurationError("agents", spec, f"{attr!r} is not a callable")
            hook(default_registry())


def app_from_environment() -> Any:
    """The app of one worker, from :data:`SETTINGS_ENV` (uvicorn calls this, ``factory=True``)."""
    from ._app import create_app

    raw = os.environ.get(SETTINGS_ENV)
    if raw is None:
        raise ConfigurationError(SETTINGS_ENV, None, "is not set; start workers with serve")
    try:
        settings: Mapping[str, Any] = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ConfigurationError(SETTINGS_ENV, raw, f"is not JSON: {exc}") from None
    import_agent_hooks(settings.get("agents") or ())
    runs_dir = settings.get("runs_dir")
    after = float(settings.get("takeover_after_s", 15.0))
    return create_app(
        ServerSettings(
            store=settings.get("store"),
            model=settings.get("model"),
            world_url=settings.get("world_url"),
            rate_limit=RateLimit(
                rate_per_s=float(settings.get("rate_per_s", 20.0)),
                burst=int(settings.get("burst", 40)),
            ),
            runs_dir=None if runs_dir is None else Path(runs_dir),
            queue=settings.get("queue"),
            takeover_after_s=after,
            heartbeat_s=after / 5,
        )
    )


class WorkerHeaderMiddleware:
    """Adds ``X-Closedloop-Worker: <pid>`` to every HTTP response (which process served it)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.value = str(os.getpid()).encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_worker(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers.append((WORKER_HEADER.lower().encode(), self.value))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_worker)


def idempotent_task_id(session_id: str, idempotency_key: str) -> str:
    """The task id of runs started with ``Idempotency-Key: idempotency_key`` in a session."""
    digest = hashlib.sha256(f"{session_id}\0{idempotency_key}".encode()).hexdigest()
    return f"task_{digest[:16]}"
