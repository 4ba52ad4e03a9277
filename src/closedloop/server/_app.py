"""``create_app(settings)``: the FastAPI app of ``closedloop serve``.

Routes: ``/v1/sessions`` (and runs inside them), ``/v1/runs``, ``/v1/handovers``,
``/v1/agents``, ``/v1/me``; ``/metrics``, ``/healthz`` (liveness) and ``/readyz`` (readiness) without a key; the dashboard
at ``/``. Everything but the executing asyncio tasks lives in the state store, each
key's part under its own scope (:class:`ScopedStore`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.exceptions import HTTPException as StarletteHTTPException

from .._exceptions import ClosedLoopError, ModelNotAvailableError
from ..agent._trace_files import runs_root
from ..feedback import StateStore
from ..models import Model
from ._auth import ApiKeys, Principal
from ._deps import Service, authenticate, service_of
from ._dispatch import RunQueue
from ._handover_api import router as handover_router
from ._http import (
    ApiError,
    BodyLimitMiddleware,
    JsonBodyMiddleware,
    MetricsMiddleware,
    api_error_handler,
    http_exception_handler,
    install_log_redaction,
    model_unavailable_handler,
    unexpected_handler,
    validation_handler,
)
from ._metrics import ServiceMetrics
from ._provider import GatedTransport, provider_limits
from ._queued_runs import QueuedRunManager
from ._ratelimit import RateLimiter
from ._readiness import model_check, store_check
from ._recovery import recover_orphaned_runs
from ._registry import default_registry
from ._runs import RunManager
from ._scrubbed import ScrubbedJSONResponse
from ._sessions import router as sessions_router
from ._settings import ServerSettings, open_store
from ._sse import RunHub
from ._takeover import Dispatcher
from ._workers import WorkerHeaderMiddleware

__all__ = ["create_app"]

STATIC = Path(__file__).with_name("static")
_log = logging.getLogger("closedloop.server")


def _build_service(settings: ServerSettings) -> Service:
    owns = not isinstance(settings.store, StateStore)
    store = open_store(settings.store) if owns else settings.store  # type: ignore[arg-type]
    assert isinstance(store, StateStore)
    registry = settings.registry if settings.registry is not None else default_registry()
    metrics = ServiceMetrics(settings.metrics_registry)
    hub = RunHub()
    runs_dir = settings.runs_dir

    def runs_path() -> Path:
        return Path(runs_dir).expanduser() if runs_dir is not None else runs_root()

    holder: dict[str, Service] = {}
    tool_limits = provider_limits(
        enabled=settings.provider_limits,
        url=settings.provider_state_url(),
        name="tools",
        clock=settings.wall_clock,
    )
    tool_transport = GatedTransport(tool_limits) if tool_limits is not None else None

    def model() -> Model:
        return holder["service"].model()

    options: dict[str, Any] = {
        "registry": registry,
        "model": model,
        "hub": hub,
        "metrics": metrics,
        "runs_dir": runs_path,
        "world_url": settings.world_url,
        "tool_transport": tool_transport,
        "wall_clock": settings.wall_clock,
    }
    queue = None
    if settings.queue is not None:
        queue = RunQueue(
            settings.queue,
            takeover_after_s=settings.takeover_after_s,
            heartbeat_s=settings.heartbeat_s,
        )
    runs = RunManager(**options) if queue is None else QueuedRunManager(queue, **options)
    service = Service(
        settings=settings,
        store=store,
        owns_store=owns,
        registry=registry,
        keys=ApiKeys(store, clock=settings.wall_clock),
        limiter=RateLimiter(settings.rate_limit, clock=settings.clock),
        metrics=metrics,
        hub=hub,
        runs=runs,
        _model=settings.model if isinstance(settings.model, Model) else None,
        limits=provider_limits(
            enabled=settings.provider_limits,
            url=settings.provider_state_url(),
            clock=settings.wall_clock,
        ),
        tool_limits=tool_limits,
        tool_transport=tool_transport,
    )
    if service.limits is not None and service._model is not None:
        service._model = service.limits.wrap(service._model)
    holder["service"] = service
    if isinstance(runs, QueuedRunManager):
        service.dispatcher = Dispatcher(
            runs.queue, service.store_of, runs.take, runs.held_entries, runs.lose
        )
    return service


async def _gc_loop(service: Service, interval: float) -> None:
    while True:
        await asyncio.sleep(interval)
        try:
            await service.collect_garbage()
        except ClosedLoopError as exc:
            _log.warning("session garbage collection failed: %s", exc)


def create_app(settings: ServerSettings | None = None) -> FastAPI:
    """The service as an ASGI app (serve it with uvicorn; ``closedloop serve`` does)."""
    settings = settings if settings is not None else ServerSettings()
    service = _build_service(settings)
    install_log_redaction()

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        gc_task = (
            asyncio.get_running_loop().create_task(_gc_loop(service, settings.gc_interval_s))
            if settings.gc_interval_s is not None
            else None
        )
        if service.dispatcher is not None:
            await service.dispatcher.start()
        try:
            await recover_orphaned_runs(service)
        except ClosedLoopError as exc:  # the store is away: the service still answers
            _log.warning("recovery at start failed: %s", exc)
        try:
            yield
        finally:
            if gc_task is not None:
                gc_task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await gc_task
            if service.dispatcher is not None:
                await service.dispatcher.stop()
            await service.runs.shutdown(settings.shutdown_timeout_s)
            if service.runs.queue is not None:
                await service.runs.queue.close()
            for limits in (service.limits, service.tool_limits):
                if limits is not None:
                    await limits.close()
            if service.tool_transport is not None:
                await service.tool_transport.close()
            if service.owns_store:
                await service.store.close()

    app = FastAPI(
        title="closedloop",
        summary="Sessions, runs, the human handover queue and a live dashboard.",
        lifespan=lifespan,
        # FastAPI's docs pages load their scripts from a CDN; nothing here may. The schema
        # stays at /openapi.json for any local viewer.
        docs_url=None,
        redoc_url=None,
        default_response_class=ScrubbedJSONResponse,  # no answer holds a secret in clear
    )
    app.state.service = service
    app.add_exception_handler(ApiError, api_error_handler)
    # Unknown routes and methods answer in the service's one error shape, too.
    app.add_exception_handler(StarletteHTTPException, http_exception_handler)
    app.add_exception_handler(RequestValidationError, validation_handler)
    app.add_exception_handler(ModelNotAvailableError, model_unavailable_handler)
    app.add_exception_handler(Exception, unexpected_handler)
    app.add_middleware(JsonBodyMiddleware)
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes)
    app.add_middleware(MetricsMiddleware, metrics=service.metrics)
    app.add_middleware(WorkerHeaderMiddleware)
    app.include_router(sessions_router)
    app.include_router(handover_router)
    _add_service_routes(app)
    if settings.dashboard:
        _add_dashboard(app)
    return app


def _add_service_routes(app: FastAPI) -> None:
    @app.get("/healthz", tags=["service"])
    async def healthz(service: Annotated[Service, Depends(service_of)]) -> JSONResponse:
        """Liveness and the store's health (503 when the store fails)."""
        try:
            await service.store.record_get("health", "probe")
        except ClosedLoopError as exc:
            return JSONResponse(
                {"status": "degraded", "store": type(exc).__name__}, status_code=503
            )
        return JSONResponse({"status": "ok", "store": "ok", "runs_here": service.runs.local_runs})

    @app.get("/readyz", tags=["service"])
    async def readyz(service: Annotated[Service, Depends(service_of)]) -> JSONResponse:
        """Readiness: the store takes a write and the model can answer (its file on disk or
        its server reachable, its key present); 503 naming what to fix when not."""
        checks = {
            "store": await store_check(service.store),
            "model": await model_check(service.settings.model),
        }
        ready = all(c.ok for c in checks.values())
        body = {
            "status": "ready" if ready else "not_ready",
            "checks": {name: c.as_dict() for name, c in checks.items()},
        }
        return JSONResponse(body, status_code=200 if ready else 503)

    @app.get("/metrics", tags=["service"])
    async def metrics(service: Annotated[Service, Depends(service_of)]) -> Response:
        """Prometheus text exposition."""
        for limits in (service.limits, service.tool_limits):
            if limits is not None:
                with contextlib.suppress(ClosedLoopError):  # the store away: the rest shows
                    service.metrics.provider(await limits.snapshot())
        return Response(service.metrics.render(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/limits", tags=["service"])
    async def limits(
        _: Annotated[Principal, Depends(authenticate)],
        service: Annotated[Service, Depends(service_of)],
    ) -> dict[str, Any]:
        """The limiters on the path to the model and the tools: limit, in flight, 429s, ..."""
        gates = (service.limits, service.tool_limits)
        return {"providers": [await g.snapshot() for g in gates if g is not None]}

    @app.get("/v1/me", tags=["service"])
    async def me(principal: Annotated[Principal, Depends(authenticate)]) -> dict[str, Any]:
        """Who the key is (the dashboard checks a key with this)."""
        return {"key_id": principal.key_id, "name": principal.name}

    @app.get("/v1/agents", tags=["service"])
    async def agents(
        _: Annotated[Principal, Depends(authenticate)],
        service: Annotated[Service, Depends(service_of)],
    ) -> dict[str, Any]:
        """The registered agents."""
        return {
            "agents": [
                {
                    "name": spec.name,
                    "description": spec.description,
                    "source": spec.source,
                    "needs_world": spec.needs_world,
                    "available": not spec.needs_world or service.settings.world_url is not None,
                }
                for spec in service.registry
            ]
        }


def _add_dashboard(app: FastAPI) -> None:
    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.get("/", include_in_schema=False)
    async def dashboard() -> FileResponse:
        return FileResponse(STATIC / "index.html", media_type="text/html; charset=utf-8")
