"""The run record: how a run is keyed, what it holds, and how it is changed and removed.

A run's record (namespace ``runs``, key ``<session id>/<run id>``, in the key's scoped
store) is the source of truth for its status; every worker reads and changes it only by
compare-and-set, so two workers never lose each other's changes.

An ``Idempotency-Key`` maps to the first run started with it (namespace ``idempotency``,
key ``<session id>/<idempotency key>``) by an insert-if-absent, so of any number of
requests racing with one key exactly one starts a run; the run's record is written before
the mapping, so a mapping always names a run that can be read.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
from collections.abc import Callable, Mapping
from typing import Any

from .._conflict import retry_on_conflict
from .._exceptions import ConfigurationError
from .._redaction import redact
from ..feedback import HandoverQueue, Record, StateStore
from ..models import MeteredModel

__all__ = [
    "IDEMPOTENCY",
    "RUNS",
    "IdempotencyKeyReusedError",
    "agent_session",
    "delete_idempotency_keys",
    "delete_run_state",
    "first_run",
    "handover_pending",
    "hold_idempotency_key",
    "new_run_record",
    "request_fingerprint",
    "run_key",
    "run_key_of",
    "store_scope",
    "update_run",
]

RUNS = "runs"
"""The record namespace of runs, keyed ``<session id>/<run id>``."""

IDEMPOTENCY = "idempotency"
"""The record namespace of idempotency keys, keyed ``<session id>/<idempotency key>``."""

_AGENT_SESSION = re.compile(r"^(ses_[0-9a-f]{16})\.(run_[0-9a-f]{16})$")


def run_key(session_id: str, run_id: str) -> str:
    """The record key of a run: ``<session id>/<run id>``."""
    return f"{session_id}/{run_id}"


def agent_session(session_id: str, run_id: str) -> str:
    """The store session (and, for runners, the task id) of a run's task state.

    Without a ``/``, since task ids may not hold one.
    """
    return f"{session_id}.{run_id}"


def run_key_of(agent_session_id: str | None) -> str | None:
    """The run record key a task state's session belongs to (None if not the service's)."""
    match = _AGENT_SESSION.match(agent_session_id or "")
    return None if match is None else run_key(match.group(1), match.group(2))


def store_scope(store: StateStore) -> str:
    """The scope of a scoped store (``""`` for the shared one): part of local run keys."""
    return str(getattr(store, "scope", ""))


def new_run_record(
    *,
    run_id: str,
    session_id: str,
    agent_name: str,
    text: str,
    params: Mapping[str, Any],
    now: float,
    trace_path: str,
    task_id: str | None,
) -> dict[str, Any]:
    """The record of a run just started (task and params redacted)."""
    return {
        "id": run_id,
        "session_id": session_id,
        "agent": agent_name,
        "task": redact(text),
        "params": redact(dict(params)),
        "status": "running",
        "halt_reason": None,
        "success": None,
        "answer": None,
        "message": "",
        "handover_id": None,
        "agent_run_id": None,
        "agent_session": agent_session(session_id, run_id),
        "steps": 0,
        "created_at": now,
        "updated_at": now,
        "timing": {"wall_s": 0.0, "model_s": 0.0, "model_calls": 0},
        "trace_path": trace_path,
        "worker": os.getpid(),  # the process whose asyncio task executes the run
        "host": socket.gethostname(),  # where that process runs (a pid means nothing elsewhere)
        "task_id": task_id,
    }


async def update_run(
    store: StateStore,
    key: str,
    changes: Mapping[str, Any],
    *,
    now: Callable[[], float],
    timing: tuple[float, MeteredModel] | None = None,
) -> dict[str, Any]:
    """Merge ``changes`` into a run record by compare-and-set (retrying lost races).

    ``timing`` (wall seconds, the run's metered model) adds to the record's totals.
    Returns the new record, or ``{}`` when the record is gone.
    """

    async def attempt(_: int) -> dict[str, Any]:
        record = await store.record_get(RUNS, key)
        if record is None:
            return {}  # the session was deleted under the run: nothing to record
        value = {**record.to_dict(), **changes, "updated_at": now()}
        if timing is not None:
            wall_s, metered = timing
            before = value.get("timing") or {}
            value["timing"] = {
                "wall_s": float(before.get("wall_s", 0.0)) + wall_s,
                "model_s": float(before.get("model_s", 0.0)) + metered.waited_s,
                "model_calls": int(before.get("model_calls", 0)) + metered.calls,
            }
        await store.record_put(RUNS, key, value, expected_version=record.version)
        return value

    return (await retry_on_conflict(attempt, 16)).unwrap()


async def delete_run_state(store: StateStore, record: Record) -> str:
    """Remove a run's record, task state, ledger entries and handovers; returns its run id."""
    run = record.to_dict()
    run_id = str(run.get("id", ""))
    session = str(run.get("agent_session") or record.key.replace("/", ".", 1))
    await store.delete(session)
    for prefix in (f"{run_id}/", f"{session}/"):  # an Agent's task id, a runner's
        for entry in await store.record_list("ledger", prefix):
            await store.record_delete("ledger", entry.key)
    queue = HandoverQueue(store)
    for item in await queue.list():
        if item.session_id == session:
            await store.record_delete(queue.namespace, item.id)
    await store.record_delete(RUNS, record.key)
    return run_id


async def handover_pending(store: StateStore, handover_id: str | None) -> bool:
    """Whether ``handover_id`` names a handover still waiting for a decision."""
    if handover_id is None:
        return False
    record = await HandoverQueue(store).get(handover_id)
    return not record.status.decided


# --- idempotency keys ---------------------------------------------------------------------


class IdempotencyKeyReusedError(ConfigurationError):
    """An ``Idempotency-Key`` sent again with a different request body."""

    def __init__(self, key: str, run_id: str) -> None:
        super().__init__(
            "Idempotency-Key",
            key,
            f"was first sent with a different body (run {run_id}); a key names one request, "
            "so send a new key for a different agent, task or params",
        )
        self.key = key
        self.run_id = run_id


def request_fingerprint(agent_name: str, text: str, params: Mapping[str, Any]) -> str:
    """A digest of what a run request asks for: the same key must come with the same one."""
    canonical = json.dumps(
        {"agent": agent_name, "task": text, "params": dict(params)},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _key_name(session_id: str, idempotency_key: str) -> str:
    return f"{session_id}/{idempotency_key}"


async def _mapped_run(
    store: StateStore, session_id: str, idempotency_key: str, fingerprint: str, mapping: Record
) -> dict[str, Any] | None:
    """The run a key's mapping names, checked against the request; None if it is gone."""
    value = mapping.to_dict()
    run_id = str(value.get("run_id", ""))
    if value.get("fingerprint") != fingerprint:
        raise IdempotencyKeyReusedError(idempotency_key, run_id)
    run = await store.record_get(RUNS, run_key(session_id, run_id))
    return None if run is None else run.to_dict()


async def first_run(
    store: StateStore, session_id: str, idempotency_key: str, fingerprint: str
) -> dict[str, Any] | None:
    """The record of the run first started with this key, or None if there is none yet.

    Raises :class:`IdempotencyKeyReusedError` if the key came with another request body.
    """
    mapping = await store.record_get(IDEMPOTENCY, _key_name(session_id, idempotency_key))
    if mapping is None:
        return None
    return await _mapped_run(store, session_id, idempotency_key, fingerprint, mapping)


async def hold_idempotency_key(
    store: StateStore,
    session_id: str,
    idempotency_key: str,
    fingerprint: str,
    run_id: str,
    now: float,
) -> dict[str, Any] | None:
    """Map the key to ``run_id`` unless a run holds it: None if it now names ``run_id``,
    else the record of the run that holds it.

    An insert-if-absent: of requests racing with one key exactly one gets None. A mapping
    whose run is gone (its session was being deleted) is replaced by compare-and-set.
    Raises :class:`IdempotencyKeyReusedError` if the key came with another request body.
    """
    name = _key_name(session_id, idempotency_key)
    value = {"run_id": run_id, "fingerprint": fingerprint, "created_at": now}

    async def attempt(_: int) -> dict[str, Any] | None:
        mapping = await store.record_get(IDEMPOTENCY, name)
        if mapping is not None:
            first = await _mapped_run(store, session_id, idempotency_key, fingerprint, mapping)
            if first is not None:
                return first
        # A lost race raises StaleStateError: read the winner's mapping and answer with it.
        expected = 0 if mapping is None else mapping.version
        await store.record_put(IDEMPOTENCY, name, value, expected_version=expected)
        return None

    return (await retry_on_conflict(attempt, 16)).unwrap()


async def delete_idempotency_keys(store: StateStore, session_id: str) -> None:
    """Forget the idempotency keys of a session (it is being deleted)."""
    for record in await store.record_list(IDEMPOTENCY, f"{session_id}/"):
        await store.record_delete(IDEMPOTENCY, record.key)
