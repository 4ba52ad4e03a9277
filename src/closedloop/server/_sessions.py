"""Sessions and the runs inside them, over HTTP.

A session id or run id that is unknown, expired, malformed or another key's gets the
same 404 body: whether a resource exists is itself information another key must not
learn.
"""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import warnings
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query, Response
from fastapi.responses import StreamingResponse

from .._conflict import retry_on_conflict
from .._exceptions import ClosedLoopError, ConfigurationError, StaleStateError
from ..agent import Agent, StepRecord, read_trace
from ..feedback import Record, StateStore
from ._auth import Principal
from ._deps import SESSIONS, Service, authenticate, expired, service_of
from ._http import ApiError
from ._registry import AgentContext
from ._run_records import RUNS, IdempotencyKeyReusedError, delete_idempotency_keys, run_key
from ._schemas import RunCreate, RunFeedback, SessionCreate, SessionUpdate
from ._sse import stream_run

__all__ = ["router", "run_view"]

router = APIRouter(prefix="/v1", tags=["sessions"])

_SESSION_ID = re.compile(r"^ses_[0-9a-f]{16}$")
_RUN_ID = re.compile(r"^run_[0-9a-f]{16}$")
_PRIVATE = ("trace_path",)

Caller = Annotated[Principal, Depends(authenticate)]
Svc = Annotated[Service, Depends(service_of)]


def _not_found(what: str) -> ApiError:
    return ApiError(404, "not_found", f"{what} not found")


def run_view(value: dict[str, Any]) -> dict[str, Any]:
    """A run record as the API shows it (without server-side paths)."""
    return {k: v for k, v in value.items() if k not in _PRIVATE}


async def load_session(service: Service, store: StateStore, session_id: str) -> dict[str, Any]:
    """The live session record, or the 404."""
    if not _SESSION_ID.match(session_id):
        raise _not_found("session")
    record = await store.record_get(SESSIONS, session_id)
    if record is None:
        raise _not_found("session")
    value = record.to_dict()
    if expired(value, service.settings.wall_clock()):
        raise _not_found("session")
    return value


async def load_run(service: Service, store: StateStore, session_id: str, run_id: str) -> Record:
    """The run record of a live session, or the 404."""
    await load_session(service, store, session_id)
    if not _RUN_ID.match(run_id):
        raise _not_found("run")
    record = await store.record_get(RUNS, run_key(session_id, run_id))
    if record is None:
        raise _not_found("run")
    return record


# --- sessions ------------------------------------------------------------------------------


@router.post("/sessions", status_code=201)
async def create_session(
    principal: Caller, service: Svc, body: SessionCreate | None = None
) -> dict[str, Any]:
    """Open a session (runs live inside it; deleting it removes them)."""
    body = body if body is not None else SessionCreate()
    store = service.scoped(principal)
    now = service.settings.wall_clock()
    ttl = body.ttl_s if body.ttl_s is not None else service.settings.session_ttl_s
    session = {
        "id": "ses_" + secrets.token_hex(8),
        "created_at": now,
        "expires_at": None if ttl is None else now + ttl,
        "metadata": dict(body.metadata),
        "created_by": principal.name,
    }
    await store.record_put(SESSIONS, str(session["id"]), session, expected_version=0)
    return {**session, "runs": []}


@router.get("/sessions")
async def list_sessions(principal: Caller, service: Svc) -> dict[str, Any]:
    """This key's live sessions, oldest first."""
    store = service.scoped(principal)
    now = service.settings.wall_clock()
    sessions = [r.to_dict() for r in await store.record_list(SESSIONS)]
    live = [s for s in sessions if not expired(s, now)]
    live.sort(key=lambda s: (s.get("created_at", 0.0), s.get("id", "")))
    return {"sessions": live}


async def _session_record(service: Service, store: StateStore, session_id: str) -> Record:
    await load_session(service, store, session_id)
    record = await store.record_get(SESSIONS, session_id)
    if record is None:
        raise _not_found("session")
    return record


def _expected_version(if_match: str | None) -> int | None:
    if if_match is None:
        return None
    text = if_match.strip().removeprefix("W/").strip('"')
    if not text.isdigit():
        raise ApiError(400, "invalid_request", f"If-Match must be a session ETag, not {if_match!r}")
    return int(text)


@router.get("/sessions/{session_id}")
async def get_session(
    session_id: str, principal: Caller, service: Svc, response: Response
) -> dict[str, Any]:
    """A session and its runs; the ``ETag`` is the session's version (for ``If-Match``)."""
    store = service.scoped(principal)
    record = await _session_record(service, store, session_id)
    session = record.to_dict()
    response.headers["ETag"] = f'"{record.version}"'
    runs = [run_view(r.to_dict()) for r in await store.record_list(RUNS, f"{session_id}/")]
    runs.sort(key=lambda r: r.get("created_at", 0.0))
    return {**session, "runs": runs}


@router.patch("/sessions/{session_id}")
async def update_session(
    session_id: str,
    body: SessionUpdate,
    principal: Caller,
    service: Svc,
    response: Response,
    if_match: Annotated[str | None, Header()] = None,
) -> dict[str, Any]:
    """Merge labels into the session's metadata, by compare-and-set on its version.

    With ``If-Match: "<version>"`` (the ``ETag`` of a read) the update applies only to
    that version, else 412: of two writers racing from one read, exactly one wins. Without
    it the update is retried on the newest version, so concurrent updates all apply, once.
    """
    store = service.scoped(principal)
    expected = _expected_version(if_match)

    async def attempt(_: int) -> dict[str, Any]:
        record = await _session_record(service, store, session_id)
        if expected is not None and record.version != expected:
            raise _conflict(session_id, expected, record.version)
        session = record.to_dict()
        session["metadata"] = {**session.get("metadata", {}), **body.metadata}
        try:
            stored = await store.record_put(
                SESSIONS, session_id, session, expected_version=record.version
            )
        except StaleStateError:
            if expected is not None:
                raise _conflict(session_id, expected, None) from None
            raise  # lost a race: try again on the newest version
        response.headers["ETag"] = f'"{stored.version}"'
        return {**session, "version": stored.version}

    done = await retry_on_conflict(attempt, _UPDATE_ATTEMPTS)
    if done.ok:
        return done.unwrap()
    raise ApiError(409, "contention", "the session changed under every attempt; try again")


_UPDATE_ATTEMPTS = 64


def _conflict(session_id: str, expected: int, current: int | None) -> ApiError:
    now = "" if current is None else f" (it is at {current})"
    return ApiError(
        412, "version_conflict", f"session {session_id} is no longer at version {expected}{now}"
    )


@router.delete("/sessions/{session_id}", status_code=204)
async def delete_session(session_id: str, principal: Caller, service: Svc) -> Response:
    """Stop the session's runs and remove it with everything its runs left behind."""
    store = service.scoped(principal)
    await load_session(service, store, session_id)
    await service.runs.stop_session(store, session_id, service.settings.shutdown_timeout_s)
    for record in await store.record_list(RUNS, f"{session_id}/"):
        await service.runs.delete_run(store, record)
    await delete_idempotency_keys(store, session_id)
    await store.record_delete(SESSIONS, session_id)
    return Response(status_code=204)


# --- runs ----------------------------------------------------------------------------------


@router.post(
    "/sessions/{session_id}/runs",
    status_code=202,
    tags=["runs"],
    responses={
        200: {"description": "The run this Idempotency-Key first started; nothing new ran"},
        422: {"description": "A bad body, or an Idempotency-Key reused with another body"},
    },
)
async def create_run(
    session_id: str,
    body: RunCreate,
    principal: Caller,
    service: Svc,
    response: Response,
    idempotency_key: Annotated[str | None, Header(max_length=200)] = None,
) -> dict[str, Any]:
    """Start an agent on a task; it runs in the background (poll it or follow its events).

    202 with the new run. A request repeating an ``Idempotency-Key`` of the session is
    answered 200 with the run the key first started (same id, its current status) and
    starts nothing, also when the requests race; the same key with a different body is
    refused with 422. The key's runs share one task id, so an effect (an order, a
    payment) is applied once however often the request is retried.
    """
    store = service.scoped(principal)
    await load_session(service, store, session_id)
    try:
        record, started = await service.runs.start_or_join(
            store, session_id, body.agent, body.task, body.params, idempotency_key
        )
    except IdempotencyKeyReusedError as exc:
        problem = {"where": "header.idempotency-key", "problem": f"{exc.key!r} {exc.reason}"}
        raise ApiError(422, "idempotency_key_reused", str(exc), problems=[problem]) from None
    except ConfigurationError as exc:
        problem = {"where": f"body.{exc.argument}", "problem": exc.reason}
        raise ApiError(422, "invalid_request", str(exc), problems=[problem]) from None
    if not started:
        response.status_code = 200
    return run_view(record)


@router.get("/sessions/{session_id}/runs", tags=["runs"])
async def list_session_runs(session_id: str, principal: Caller, service: Svc) -> dict[str, Any]:
    """The runs of one session, oldest first."""
    store = service.scoped(principal)
    await load_session(service, store, session_id)
    runs = [run_view(r.to_dict()) for r in await store.record_list(RUNS, f"{session_id}/")]
    runs.sort(key=lambda r: r.get("created_at", 0.0))
    return {"runs": runs}


@router.get("/runs", tags=["runs"])
async def list_runs(
    principal: Caller,
    service: Svc,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    status: Annotated[str | None, Query(max_length=32)] = None,
) -> dict[str, Any]:
    """This key's runs across its live sessions, newest first."""
    store = service.scoped(principal)
    now = service.settings.wall_clock()
    live = {r.key for r in await store.record_list(SESSIONS) if not expired(r.to_dict(), now)}
    runs = [run_view(r.to_dict()) for r in await store.record_list(RUNS)]
    runs = [r for r in runs if r.get("session_id") in live]
    if status is not None:
        runs = [r for r in runs if r.get("status") == status]
    runs.sort(key=lambda r: r.get("created_at", 0.0), reverse=True)
    return {"runs": runs[:limit]}


@router.get("/sessions/{session_id}/runs/{run_id}", tags=["runs"])
async def get_run(session_id: str, run_id: str, principal: Caller, service: Svc) -> dict[str, Any]:
    """A run's status (``running``, ``handover``, ``done``, ``error``, ``cancelled``)."""
    record = await load_run(service, service.scoped(principal), session_id, run_id)
    return run_view(record.to_dict())


@router.get("/sessions/{session_id}/runs/{run_id}/result", tags=["runs"])
async def get_result(
    session_id: str, run_id: str, principal: Caller, service: Svc
) -> dict[str, Any]:
    """The run's result once it has halted (409 while it is still running)."""
    record = await load_run(service, service.scoped(principal), session_id, run_id)
    run = record.to_dict()
    if run.get("status") == "running":
        raise ApiError(409, "not_finished", "the run is still running")
    keys = ("id", "status", "halt_reason", "success", "answer", "message", "fields",
            "handover_id", "steps", "timing", "agent_run_id")  # fmt: skip
    return {k: run.get(k) for k in keys}


def _step_records(path: str | None) -> list[StepRecord]:
    if not path:
        return []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a line being written right now
        try:
            records, _ = read_trace(path)
        except ConfigurationError:
            return []
    return records


def _read_steps(path: str | None) -> list[dict[str, Any]]:
    return [r.model_dump(mode="json") for r in _step_records(path)]


@router.post("/sessions/{session_id}/runs/{run_id}/feedback", tags=["runs"])
async def run_feedback(
    session_id: str, run_id: str, body: RunFeedback, principal: Caller, service: Svc
) -> dict[str, Any]:
    """How a halted run turned out (``ok``: its answer was right), for the risk controller
    of its agent: each call the run accepted without escalating moves that tool's
    acceptance threshold, kept in the caller's store. 409 while the run is running; 422
    when the agent has no risk controller (``Sampling(risk=...)``) or is a runner."""
    store = service.scoped(principal)
    run = (await load_run(service, store, session_id, run_id)).to_dict()
    if run.get("status") == "running":
        raise ApiError(409, "not_finished", "the run is still running")
    ctx = AgentContext(
        model=service.model(),
        store=store,
        session_id=session_id,
        run_id=run_id,
        params=dict(run.get("params") or {}),
        world_url=service.runs.world_url,
    )
    try:
        agent = await service.registry.build(str(run.get("agent")), ctx)
        if not isinstance(agent, Agent):
            raise ConfigurationError("agent", run.get("agent"), "is a runner, not an Agent")
        steps = await asyncio.to_thread(_step_records, run.get("trace_path"))
        thresholds = await agent.feedback(steps, ok=body.ok)
    except ConfigurationError as exc:
        raise ApiError(422, "no_risk_control", str(exc)) from None
    return {"id": run_id, "ok": body.ok, "thresholds": thresholds}


@router.get("/sessions/{session_id}/runs/{run_id}/trace", tags=["runs"])
async def get_trace(
    session_id: str, run_id: str, principal: Caller, service: Svc
) -> dict[str, Any]:
    """Every step record so far (as in the JSONL trace: secrets already redacted)."""
    record = await load_run(service, service.scoped(principal), session_id, run_id)
    run = record.to_dict()
    steps = await asyncio.to_thread(_read_steps, run.get("trace_path"))
    return {"run_id": run_id, "status": run.get("status"), "steps": steps}


@router.get("/sessions/{session_id}/runs/{run_id}/events", tags=["runs"])
async def run_events(
    session_id: str,
    run_id: str,
    principal: Caller,
    service: Svc,
    last_event_id: Annotated[str | None, Header()] = None,
) -> StreamingResponse:
    """Server-sent events: ``step`` (e, u, f_est, protocol, actuators), ``status``, ``end``."""
    store = service.scoped(principal)
    record = await load_run(service, store, session_id, run_id)
    key = run_key(session_id, run_id)

    async def status() -> dict[str, Any] | None:
        try:
            current = await store.record_get(RUNS, key)
        except ClosedLoopError:
            return None
        return None if current is None else current.to_dict()

    start_after = int(last_event_id) if last_event_id and last_event_id.isdigit() else -1
    stream = stream_run(
        service.hub,
        f"{store.scope}/{key}",
        status,
        record.to_dict().get("trace_path"),
        poll_s=service.settings.sse_poll_s,
        keepalive_s=service.settings.sse_keepalive_s,
        start_after=start_after,
    )
    return StreamingResponse(
        stream,
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


@router.post("/sessions/{session_id}/runs/{run_id}/recover", status_code=202, tags=["runs"])
async def recover_run(
    session_id: str, run_id: str, principal: Caller, service: Svc
) -> dict[str, Any]:
    """Continue, on this worker, a run whose worker died (its record still says running).

    The task resumes from its last saved step: pending effects are reconciled first and a
    committed effect is replayed, never applied again. A worker that was only slow loses
    the task at its next save. 409 if the run is not running, or runs in this worker.
    """
    store = service.scoped(principal)
    record = await load_run(service, store, session_id, run_id)
    run = record.to_dict()
    if run.get("status") != "running":
        raise ApiError(409, "not_running", f"the run is {run.get('status')}, not running")
    if service.runs.executes_here(store, record.key):
        raise ApiError(409, "running_here", "the run is executing in this worker")
    if service.runs.queue is not None:
        raise ApiError(
            409,
            "dispatched",
            "runs go through the run queue: a live worker takes a run over from one that "
            f"stopped within {service.runs.queue.takeover_after_s:g} s",
        )
    try:
        await service.runs.recover(store, run)
    except ConfigurationError as exc:
        raise ApiError(409, "cannot_recover", str(exc)) from None
    return {"id": run_id, "status": "recovering", "worker": os.getpid()}


@router.post("/sessions/{session_id}/runs/{run_id}/cancel", status_code=202, tags=["runs"])
async def cancel_run(
    session_id: str, run_id: str, principal: Caller, service: Svc
) -> dict[str, Any]:
    """Stop a running run (it ends ``cancelled``); 409 if it is not running here."""
    store = service.scoped(principal)
    record = await load_run(service, store, session_id, run_id)
    run = record.to_dict()
    if run.get("status") != "running":
        raise ApiError(409, "not_running", f"the run is {run.get('status')}, not running")
    if not service.runs.cancel(store, record.key):
        raise ApiError(409, "not_here", "the run executes in another worker")
    return {"id": run_id, "status": "cancelling"}
