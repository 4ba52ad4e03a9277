"""The human handover queue over HTTP: list, show, approve, edit then approve, reject.

A decision is recorded once (compare-and-set in the queue: of two reviewers racing,
one gets 409) and then resumes the frozen run from the store, where it froze: approve
runs the frozen action, edit runs it as changed, reject ends the task. The reviewer's
name is the key's name, never a value the client sends.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from pydantic import ValidationError

from .._exceptions import ConfigurationError, SessionNotFoundError, StaleStateError
from .._redaction import redact
from ..agent import TaskState
from ..agent._fold import apply_edits
from ..feedback import HandoverDecision, HandoverItem, HandoverQueue, HandoverStatus, StateStore
from ._auth import Principal
from ._deps import Service, authenticate, service_of
from ._http import ApiError
from ._run_records import RUNS, run_key_of
from ._schemas import ChoiceBody, DecisionBody, EditBody
from ._sessions import run_view
from ._takeover import CHOICES, apply_choice, end_task, is_pending_effect

__all__ = ["router"]

router = APIRouter(prefix="/v1/handovers", tags=["handovers"])

Caller = Annotated[Principal, Depends(authenticate)]
Svc = Annotated[Service, Depends(service_of)]
_MAX_OBSERVATIONS = 12


def _not_found() -> ApiError:
    return ApiError(404, "not_found", "handover not found")


def _summary(item: HandoverItem) -> dict[str, Any]:
    audit = item.audit
    key = run_key_of(item.session_id)
    session_id, run_id = key.split("/", 1) if key is not None else (None, None)
    return {
        "id": item.id,
        "status": item.status.value,
        "task_id": item.task_id,
        "run_id": run_id,
        "session_id": session_id,
        "created_at": item.created_at,
        "decided_at": item.decided_at,
        "decided_by": item.decided_by,
        "note": item.note,
        "task": audit.get("task"),
        "reason": audit.get("reason") or "; ".join(map(str, audit.get("failed_checks", []))),
        "pending_action": audit.get("pending_action"),
    }


def _detail(item: HandoverItem) -> dict[str, Any]:
    frozen = item.frozen_state or {}
    observations = list(frozen.get("observations") or [])[-_MAX_OBSERVATIONS:]
    audit = dict(item.audit)
    return {
        **_summary(item),
        "audit": audit,
        "failed_checks": audit.get("failed_checks", []),
        "suggested_fix": audit.get("suggested_fix"),
        "observations": redact(observations),
        "required_fields": redact(frozen.get("required_fields") or {}),
        "edits": None if item.edits is None else redact(item.edits),
    }


async def _item(store: StateStore, handover_id: str) -> HandoverItem:
    try:
        return await HandoverQueue(store).get(handover_id)
    except (SessionNotFoundError, ConfigurationError):
        raise _not_found() from None


@router.get("")
async def list_handovers(
    principal: Caller,
    service: Svc,
    status: Annotated[HandoverStatus | None, Query()] = HandoverStatus.PENDING,
    all: Annotated[bool, Query(description="every status, not only `status`")] = False,
) -> dict[str, Any]:
    """The queue, oldest first (pending only unless ``status`` or ``all`` says otherwise)."""
    queue = HandoverQueue(service.scoped(principal))
    items = await queue.list(None if all else status)
    return {"handovers": [_summary(i) for i in items]}


@router.get("/{handover_id:path}")
async def show_handover(handover_id: str, principal: Caller, service: Svc) -> dict[str, Any]:
    """One item: its audit list, the observations, the failed checks and the suggested fix."""
    return _detail(await _item(service.scoped(principal), handover_id))


def _check_edits(item: HandoverItem, edits: dict[str, Any]) -> None:
    if item.frozen_state is None:
        return
    try:
        state = TaskState.model_validate(item.frozen_state)
        apply_edits(state, edits)
    except ConfigurationError as exc:
        raise ApiError(422, "invalid_request", f"edits: {exc.reason} ({exc.value!r})") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "edits"
        raise ApiError(422, "invalid_request", f"edits.{where}: {first['msg']}") from None


async def _decide(
    service: Service,
    principal: Principal,
    handover_id: str,
    decision: HandoverDecision,
    note: str,
    edits: dict[str, Any] | None = None,
) -> dict[str, Any]:
    store = service.scoped(principal)
    item = await _item(store, handover_id)
    if item.status.decided:
        raise ApiError(409, "already_decided", f"the handover was already {item.status.value}")
    if is_pending_effect(item):
        raise ApiError(
            422,
            "invalid_request",
            f"decision {decision.value!r}: this handover is a pending effect; POST "
            f".../choose with a choice of {', '.join(CHOICES)}",
        )
    if edits is not None:
        _check_edits(item, edits)
    try:
        item = await HandoverQueue(store).decide(
            handover_id, decision, edits=edits, note=note, decided_by=principal.name
        )
    except StaleStateError:
        raise ApiError(409, "already_decided", "the handover was decided by someone else") from None
    service.metrics.handovers.labels(item.status.value).inc()
    run: dict[str, Any] | None = None
    key = run_key_of(item.session_id)
    record = None if key is None else await store.record_get(RUNS, key)
    if record is not None:
        try:
            await service.runs.resume(store, record.to_dict(), item.id)
        except ConfigurationError as exc:
            await service.runs.update(
                store,
                record.key,
                {
                    "status": "error",
                    "halt_reason": "error",
                    "success": False,
                    "message": redact(f"could not resume: {exc}"),
                },
            )
        latest = await store.record_get(RUNS, record.key)
        run = None if latest is None else run_view(latest.to_dict())
    return {"handover": _detail(item), "run": run}


@router.post("/{handover_id:path}/approve")
async def approve(
    handover_id: str, principal: Caller, service: Svc, body: DecisionBody | None = None
) -> dict[str, Any]:
    """Approve: the frozen action runs as it was, and the task goes on."""
    note = body.note if body is not None else ""
    return await _decide(service, principal, handover_id, HandoverDecision.APPROVE, note)


@router.post("/{handover_id:path}/edit")
async def edit(handover_id: str, body: EditBody, principal: Caller, service: Svc) -> dict[str, Any]:
    """Edit, then approve: ``arguments`` patch the frozen call, ``fields`` set fields."""
    return await _decide(
        service, principal, handover_id, HandoverDecision.EDIT, body.note, dict(body.edits)
    )


@router.post("/{handover_id:path}/reject")
async def reject(
    handover_id: str, principal: Caller, service: Svc, body: DecisionBody | None = None
) -> dict[str, Any]:
    """Reject: the task ends, recorded as a handover without success."""
    note = body.note if body is not None else ""
    return await _decide(service, principal, handover_id, HandoverDecision.REJECT, note)


@router.post("/{handover_id:path}/choose")
async def choose(
    handover_id: str, body: ChoiceBody, principal: Caller, service: Svc
) -> dict[str, Any]:
    """On a pending effect: ``mark_applied`` (it reached the world; ``result`` is what it
    returned), ``retry`` (it did not; run it again) or ``abandon`` (end the run)."""
    if body.choice not in CHOICES:
        raise ApiError(
            422,
            "invalid_request",
            f"choice {body.choice!r} is not one of {', '.join(CHOICES)}",
        )
    store = service.scoped(principal)
    item = await _item(store, handover_id)
    if not is_pending_effect(item):
        raise ApiError(
            422,
            "invalid_request",
            f"choice {body.choice!r}: this handover is not a pending effect; approve, edit "
            "or reject it",
        )
    if item.status.decided:
        raise ApiError(409, "already_decided", f"the handover was already {item.status.value}")
    abandon = body.choice == "abandon"
    try:
        item = await HandoverQueue(store).decide(
            handover_id,
            HandoverDecision.REJECT if abandon else HandoverDecision.EDIT,
            edits=None if abandon else {"choice": body.choice, "result": body.result},
            note=body.note,
            decided_by=principal.name,
        )
    except StaleStateError:
        raise ApiError(409, "already_decided", "the handover was decided by someone else") from None
    service.metrics.handovers.labels(item.status.value).inc()
    settled = await apply_choice(store, item, body.choice, body.result, principal.name)
    key = run_key_of(item.session_id)
    record = None if key is None else await store.record_get(RUNS, key)
    run: dict[str, Any] | None = None
    if record is not None:
        if abandon:
            await end_task(store, str(item.session_id))
            await service.runs.update(
                store,
                record.key,
                {
                    "status": "done",
                    "halt_reason": "handover",
                    "success": False,
                    "message": f"abandoned by {principal.name}: the effect may have been applied",
                },
            )
        else:
            await service.runs.release(store, record.to_dict())
        latest = await store.record_get(RUNS, record.key)
        run = None if latest is None else run_view(latest.to_dict())
    return {"handover": {**_detail(item), "choice": body.choice, "settled": settled}, "run": run}
