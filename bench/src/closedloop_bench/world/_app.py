"""The FastAPI app: the world's routes wrapped in fault injection, plus /admin and /health.

Every response carries ``x-request-id``; every injected fault is logged under it. Fault
injection sits in a custom route class, so it knows which endpoint a request is for
before deciding anything. Order per request: index → plan → latency → (short-circuit
fault | idempotency | endpoint → commit-then-fail, empty, drift).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Annotated, Any

from fastapi import FastAPI, Query, Request, Response
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from pydantic import BaseModel, ConfigDict
from starlette.datastructures import MutableHeaders
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ._data import DEFAULT_SEED
from ._endpoints import ENDPOINTS
from ._faults import WorldFaultProfile
from ._http import REQUEST_ID, WorldDep, problem_response
from ._injector import FaultPlan, WorldFaultEvent, WorldFaultKind, apply_drift, empty_body
from ._recorder import IdempotencyState, StoredResponse
from ._regimes import SERVICES
from ._routes_office import register_office
from ._routes_travel import register_travel
from ._schemas import EffectCounters, Health, WorldEffectRecord
from ._world import World, fail

__all__ = ["create_world_app"]

_FAULT_ERRORS = {
    429: ("rate_limited", "too many requests; retry after the delay in Retry-After"),
    500: ("internal_error", "the server failed to answer"),
    502: ("bad_gateway", "an upstream service failed"),
    503: ("service_unavailable", "the service is temporarily unavailable"),
    504: ("gateway_timeout", "an upstream service timed out"),
}


def _retry_after(seconds: float) -> str:
    # Integer seconds per RFC 9110 when whole; a decimal only for scaled-down test worlds.
    return str(int(seconds)) if float(seconds).is_integer() else f"{seconds:.3f}"


def _fault_response(world: World, status: int, retry_after_s: float | None) -> JSONResponse:
    code, detail = _FAULT_ERRORS.get(status, ("server_error", "the server failed to answer"))
    headers = None
    if retry_after_s is not None:
        headers = {"retry-after": _retry_after(retry_after_s * world.latency_scale)}
    return problem_response(fail(status, code, detail), headers)


class _RequestIdMiddleware:
    """Gives every request an id (ASGI scope) and returns it as ``x-request-id``."""

    def __init__(self, app: ASGIApp, world: World) -> None:
        self.app = app
        self.world = world

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = self.world.recorder.next_request_id()
        scope[REQUEST_ID] = request_id

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message)["x-request-id"] = request_id
            await send(message)

        await self.app(scope, receive, send_with_id)


def _log(world: World, plan: FaultPlan, rid: str, kind: WorldFaultKind, **extra: Any) -> None:
    world.recorder.log_fault(
        WorldFaultEvent(
            request_id=rid,
            endpoint=plan.endpoint,
            index=plan.index,
            kind=kind,
            t_s=world.recorder.elapsed(),
            **extra,
        )
    )


def _rebody(response: Response, body: Any) -> JSONResponse:
    headers = {k: v for k, v in response.headers.items() if k.lower() != "content-length"}
    return JSONResponse(body, status_code=response.status_code, headers=headers)


_Handler = Callable[[Request], Coroutine[Any, Any, Response]]


async def _run(world: World, name: str, request: Request, call: _Handler) -> Response:
    """One request through the fault injector and the idempotency store."""
    spec = ENDPOINTS[name]
    rec = world.recorder
    rid = str(request.scope.get(REQUEST_ID, "req-unknown"))
    with world.lock:
        index = rec.next_index(name)
        service = SERVICES[name]
        service_index = rec.next_service_index(service)
        plan = world.planner.plan(name, index, rec.elapsed(), service_index)
        if plan.regime is not None:
            rec.note_regime(service, service_index, plan.regime)
    if plan.latency_s > 0.0:
        _log(world, plan, rid, WorldFaultKind.LATENCY, latency_s=plan.latency_s)
    if plan.slow:
        _log(world, plan, rid, WorldFaultKind.SLOW, latency_s=plan.latency_s)
    await world.delay(plan.latency_s)
    if plan.short_circuit:
        assert plan.outcome is not None and plan.status is not None
        _log(world, plan, rid, plan.outcome, status=plan.status, retry_after_s=plan.retry_after_s)
        rec.count(name, "faulted")
        return _fault_response(world, plan.status, plan.retry_after_s)

    key = request.headers.get("idempotency-key") if spec.mutating else None
    if spec.mutating and key is None:
        rec.count(name, "missing_idempotency_key")
    if key is not None:
        try:
            body = await request.body()
        except ClientDisconnect:
            # The client gave up (its timeout fired) before sending the body: nothing was
            # applied, and there is nobody to answer.
            return Response(status_code=499)
        body_hash = hashlib.sha256(body).hexdigest()
        state, stored = rec.idempotency_begin(name, key, body_hash)
        if state is IdempotencyState.REPLAY:
            assert stored is not None
            rec.count(name, "replays")
            return Response(
                stored.body,
                status_code=stored.status,
                media_type=stored.media_type,
                headers={"idempotent-replayed": "true"},
            )
        if state is not IdempotencyState.NEW:
            rec.count(name, "rejected")
            if state is IdempotencyState.MISMATCH:
                bad = fail(422, "idempotency_key_reused", "this key was used with another body")
            else:
                bad = fail(409, "idempotency_key_in_use", "a request with this key is running")
            return problem_response(bad)
    try:
        response = await call(request)
    except BaseException:
        if key is not None:
            rec.idempotency_finish(name, key, None)
        raise
    status = response.status_code
    if key is not None:
        # 5xx answers are not final: the key is released for a fresh attempt.
        stored = None
        if status < 500:
            stored = StoredResponse(status, bytes(response.body), response.media_type)
        rec.idempotency_finish(name, key, stored)
    if spec.mutating and 400 <= status < 500:
        rec.count(name, "rejected")
    if plan.outcome is WorldFaultKind.COMMIT_THEN_FAIL and status < 300:
        assert plan.status is not None
        _log(world, plan, rid, plan.outcome, status=plan.status, detail="effect committed")
        rec.count(name, "commit_then_fail")
        return _fault_response(world, plan.status, None)
    if plan.outcome in (WorldFaultKind.EMPTY, WorldFaultKind.DRIFT) and status == 200:
        body = json.loads(bytes(response.body))
        if plan.outcome is WorldFaultKind.EMPTY:
            _log(world, plan, rid, plan.outcome, status=200)
            return _rebody(response, empty_body(name, body))
        assert plan.drift is not None
        drifted, changed = apply_drift(body, plan.drift)
        if changed:
            _log(world, plan, rid, plan.outcome, status=200, detail=", ".join(changed))
            return _rebody(response, drifted)
    return response


class _FaultRoute(APIRoute):
    """A route whose requests pass through ``_run`` (world endpoints only)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        original = super().get_route_handler()
        if self.name not in ENDPOINTS:
            return original
        name = self.name

        async def handler(request: Request) -> Response:
            world: World = request.app.state.world
            return await _run(world, name, request, original)

        return handler


class CountersOut(BaseModel):
    model_config = ConfigDict(frozen=True)
    endpoints: dict[str, EffectCounters]
    requests: dict[str, int]


class FaultLogOut(BaseModel):
    model_config = ConfigDict(frozen=True)
    faults: list[WorldFaultEvent]
    count: int


class EffectsOut(BaseModel):
    model_config = ConfigDict(frozen=True)
    effects: list[WorldEffectRecord]
    count: int


def _register_admin(app: FastAPI) -> None:
    @app.get("/health", response_model=Health)
    async def health(world: WorldDep) -> Any:
        d = world.data
        return Health(
            seed=world.seed,
            fault_seed=world.fault_seed,
            profile=world.profile.name,
            latency_scale=world.latency_scale,
            today=d.today,
            weather_from=d.weather_from,
            weather_to=d.weather_to,
            schedule_from=d.schedule_from,
            schedule_to=d.schedule_to,
        )

    @app.get("/admin/counters", response_model=CountersOut)
    async def admin_counters(world: WorldDep) -> Any:
        """Per effect/compensation endpoint: calls, effects, duplicates, replays, ..."""
        return CountersOut(endpoints=world.counters(), requests=world.request_counts())

    @app.get("/admin/faults", response_model=FaultLogOut)
    async def admin_faults(
        world: WorldDep,
        endpoint: Annotated[str | None, Query()] = None,
        kind: Annotated[WorldFaultKind | None, Query()] = None,
    ) -> Any:
        """The fault log (ground truth), optionally filtered by endpoint and kind."""
        rows = list(world.fault_log(endpoint, kind))
        return FaultLogOut(faults=rows, count=len(rows))

    @app.get("/admin/effects", response_model=EffectsOut)
    async def admin_effects(world: WorldDep, endpoint: str | None = None) -> Any:
        rows = list(world.effects(endpoint))
        return EffectsOut(effects=rows, count=len(rows))

    @app.get("/admin/profile", response_model=WorldFaultProfile)
    async def admin_profile(world: WorldDep) -> Any:
        return world.profile

    @app.post("/admin/reset", response_model=Health)
    async def admin_reset(
        world: WorldDep, fault_seed: Annotated[int | None, Query()] = None
    ) -> Any:
        """New episode: fresh state, counters and logs; ``fault_seed`` re-draws the faults."""
        world.reset(fault_seed=fault_seed)
        return await health(world)


def create_world_app(
    world: World | None = None,
    *,
    seed: int = DEFAULT_SEED,
    profile: str | Path | WorldFaultProfile = "none",
    latency_scale: float = 1.0,
) -> FastAPI:
    """The world's ASGI app, for ``world`` or a new ``World(seed, profile, latency_scale)``.

    ``app.state.world`` is the ``World`` (ground truth: fault log, counters, effects).
    """
    if world is None:
        world = World(seed=seed, profile=profile, latency_scale=latency_scale)
    app = FastAPI(
        title="closedloop world",
        description="Deterministic services with injected faults, for agents and benchmarks.",
        version="1",
    )
    app.state.world = world
    app.router.route_class = _FaultRoute
    register_travel(app)
    register_office(app)
    _register_admin(app)
    app.add_middleware(_RequestIdMiddleware, world=world)
    return app
