"""The human handover queue: frozen tasks waiting for a person to approve, edit or reject.

When the protocol selector reaches ``MANUAL_HANDOVER`` the loop freezes its task state,
builds an audit list (what was observed, which checks failed, a suggested fix; see
``build_audit`` in ``closedloop/agent/_trace.py``) and submits both here; a reviewer later decides, exactly once, and the decision resumes or
ends the task. Items are records in a :class:`StateStore` namespace, so they survive the
process and a whole fleet of servers shares one queue. This module is the one place that
defines the record format: ``EscalateToHuman`` writes its escalation entries through
:func:`escalation_record`, and :meth:`HandoverItem.from_record` reads both kinds.

Audits are redacted on the way in (:func:`redact`, kept importable from here; the
detectors live in ``closedloop/_redaction.py``).
"""

from __future__ import annotations

import builtins
import logging
import secrets
import time
from collections.abc import Callable, Mapping
from enum import StrEnum
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .._conflict import retry_on_conflict
from .._exceptions import ConfigurationError, SessionNotFoundError, StaleStateError
from .._redaction import redact
from ._contract import Record, StateStore
from ._store import record_name

__all__ = [
    "HANDOVER_NAMESPACE",
    "HandoverDecision",
    "HandoverItem",
    "HandoverQueue",
    "HandoverStatus",
    "escalation_record",
]

HANDOVER_NAMESPACE = "handover"
"""The record namespace of the human handover queue."""

_FORMAT = 1
_DECIDE_ATTEMPTS = 4
_log = logging.getLogger("closedloop.handover")

# --- the item ------------------------------------------------------------------------------


class HandoverStatus(StrEnum):
    """Where a handover stands. Every status but ``PENDING`` is final."""

    PENDING = "pending"
    APPROVED = "approved"
    EDITED = "edited"
    REJECTED = "rejected"

    @property
    def decided(self) -> bool:
        """True once a reviewer has decided."""
        return self is not HandoverStatus.PENDING


class HandoverDecision(StrEnum):
    """A reviewer's answer: resume as frozen, resume with edits, or end the task."""

    APPROVE = "approve"
    EDIT = "edit"
    REJECT = "reject"

    @property
    def status(self) -> HandoverStatus:
        """The status an item takes on this decision."""
        return _STATUS_OF[self]


_STATUS_OF = {
    HandoverDecision.APPROVE: HandoverStatus.APPROVED,
    HandoverDecision.EDIT: HandoverStatus.EDITED,
    HandoverDecision.REJECT: HandoverStatus.REJECTED,
}


class HandoverItem(BaseModel):
    """One entry of the handover queue, as read from the store.

    ``audit`` is what the reviewer sees (``observed`` steps, ``failed_checks``,
    ``suggested_fix``, ...); ``frozen_state`` is the task state to resume from;
    ``edits`` are the reviewer's changes to it (only for ``edited``). ``version`` is the
    store record's version, for callers that want their own compare-and-set.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    task_id: str
    run_id: str | None = None
    session_id: str | None = None
    status: HandoverStatus = HandoverStatus.PENDING
    audit: dict[str, Any] = Field(default_factory=dict)
    frozen_state: dict[str, Any] | None = None
    edits: dict[str, Any] | None = None
    note: str = ""
    created_at: float
    decided_at: float | None = None
    decided_by: str | None = None
    version: int = Field(default=0, ge=0)

    def state_to_resume(self) -> dict[str, Any] | None:
        """The state a decided task resumes from: frozen, or frozen with the edits applied.

        None while pending, after a rejection, or when no state was frozen.
        """
        if self.frozen_state is None or self.status in (
            HandoverStatus.PENDING,
            HandoverStatus.REJECTED,
        ):
            return None
        return {**self.frozen_state, **(self.edits or {})}

    @classmethod
    def from_record(cls, record: Record) -> HandoverItem:
        """Read a queue record: one the queue wrote, or an ``EscalateToHuman`` entry.

        Raises ``ConfigurationError`` naming the record when it is neither.
        """
        value = record.to_dict()
        try:
            if value.get("format") == _FORMAT:
                fields = {k: v for k, v in value.items() if k != "format"}
                return cls.model_validate({**fields, "id": record.key, "version": record.version})
            if "event_type" in value:
                return cls._from_escalation(record, value)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "record"
            raise ConfigurationError(
                "record",
                record_name(record.namespace, record.key),
                f"not a valid handover item ({where}: {first['msg']})",
            ) from None
        raise ConfigurationError(
            "record", record_name(record.namespace, record.key), "not a handover item"
        )

    @classmethod
    def _from_escalation(cls, record: Record, value: dict[str, Any]) -> HandoverItem:
        event = value.get("event")
        if not isinstance(event, dict):
            event = {}
        status = value.get("status", "open")
        reason = value.get("reason", "")
        return cls.model_validate(
            {
                "id": record.key,
                "task_id": str(event.get("task_id") or ""),
                "run_id": event.get("run_id") if isinstance(event.get("run_id"), str) else None,
                "session_id": value.get("session_id"),
                "status": HandoverStatus.PENDING if status == "open" else status,
                "audit": {
                    "observed": [{"source": value.get("source"), "event": event}],
                    "failed_checks": [reason] if reason else [],
                    "suggested_fix": None,
                    "event_type": value.get("event_type"),
                    "occurrences": value.get("occurrences", 1),
                },
                "created_at": value.get("created_at", record.updated_at),
                "version": record.version,
            }
        )


def _record_value(item: HandoverItem) -> dict[str, Any]:
    fields = item.model_dump(mode="json", exclude={"id", "version"})
    return {"format": _FORMAT, **fields}


def escalation_record(
    *,
    session_id: str | None,
    source: str,
    event_type: str,
    event: Mapping[str, Any],
    occurrences: int,
    reason: str,
    created_at: float,
) -> dict[str, Any]:
    """The record ``EscalateToHuman`` writes for a fault that needs a person.

    The queue lists it as a pending item whose audit shows the event and the reason.
    """
    return {
        "status": "open",
        "session_id": session_id,
        "source": source,
        "event_type": event_type,
        "event": redact(dict(event)),
        "occurrences": occurrences,
        "reason": redact(reason),
        "created_at": created_at,
    }


# --- the queue -----------------------------------------------------------------------------


def _default_id() -> str:
    return "ho_" + secrets.token_urlsafe(18)


def _require_text(argument: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigurationError(argument, value, "must be a non-empty string")
    return value


def _optional_text(argument: str, value: object) -> str | None:
    return None if value is None else _require_text(argument, value)


class HandoverQueue:
    """The persisted queue of tasks handed to a person, on any :class:`StateStore`.

    Item ids are random and unguessable (``ho_`` + 144 random bits); entries written by
    ``EscalateToHuman`` keep their ``<session>/<id>`` keys, so an id may contain ``/``.
    Errors: an unknown id raises ``SessionNotFoundError`` (a not-found, like an unknown
    session); deciding an item that is already decided, including losing a race to
    another reviewer, raises ``StaleStateError``; bad arguments raise
    ``ConfigurationError``.
    """

    def __init__(
        self,
        store: StateStore,
        namespace: str = HANDOVER_NAMESPACE,
        *,
        clock: Callable[[], float] = time.time,
        new_id: Callable[[], str] = _default_id,
    ) -> None:
        self.store = store
        self.namespace = _require_text("namespace", namespace)
        self._clock = clock
        self._new_id = new_id

    def __repr__(self) -> str:
        return f"HandoverQueue(namespace={self.namespace!r})"

    async def submit(
        self,
        task_id: str,
        run_id: str,
        audit: Mapping[str, Any],
        *,
        frozen_state: Mapping[str, Any] | None = None,
        session_id: str | None = None,
    ) -> str:
        """Queue a frozen task for a decision; returns the new item's id.

        ``audit`` (a JSON object, usually from ``build_audit``) is stored redacted; ``frozen_state`` is stored as given, because the
        task resumes from it exactly.
        """
        if not isinstance(audit, Mapping):
            raise ConfigurationError("audit", audit, "must be a mapping (a JSON object)")
        if frozen_state is not None and not isinstance(frozen_state, Mapping):
            raise ConfigurationError("frozen_state", frozen_state, "must be a mapping or None")
        item_id = _require_text("new_id()", self._new_id())
        item = HandoverItem(
            id=item_id,
            task_id=_require_text("task_id", task_id),
            run_id=_require_text("run_id", run_id),
            session_id=_optional_text("session_id", session_id),
            audit=redact(dict(audit)),
            frozen_state=None if frozen_state is None else dict(frozen_state),
            created_at=float(self._clock()),
        )
        await self.store.record_put(
            self.namespace, item_id, _record_value(item), expected_version=0
        )
        return item_id

    async def _read(self, item_id: str) -> tuple[Record, HandoverItem]:
        record = await self.store.record_get(self.namespace, _require_text("id", item_id))
        if record is None:
            raise SessionNotFoundError(
                f"handover {item_id!r} not found in namespace {self.namespace!r}"
            )
        return record, HandoverItem.from_record(record)

    async def get(self, id: str) -> HandoverItem:
        """The item with this id; ``SessionNotFoundError`` if there is none."""
        return (await self._read(id))[1]

    async def list(self, status: HandoverStatus | str | None = None) -> builtins.list[HandoverItem]:
        """Items, oldest first, optionally only those with ``status``.

        A record in the namespace that is not a handover item is skipped with a logged
        warning rather than hiding every other item from the reviewer.
        """
        wanted = None if status is None else _status(status)
        items: builtins.list[HandoverItem] = []
        for record in await self.store.record_list(self.namespace):
            try:
                item = HandoverItem.from_record(record)
            except ConfigurationError as exc:
                _log.warning("handover queue: skipped %s", exc)
                continue
            if wanted is None or item.status is wanted:
                items.append(item)
        items.sort(key=lambda i: (i.created_at, i.id))
        return items

    async def decide(
        self,
        id: str,
        decision: HandoverDecision | str,
        *,
        edits: Mapping[str, Any] | None = None,
        note: str = "",
        decided_by: str | None = None,
    ) -> HandoverItem:
        """Record a reviewer's decision, once; returns the decided item.

        ``edit`` needs ``edits`` (the fields of the frozen state to change); the others
        refuse them. The write is a compare-and-set on the item's version, so of two
        reviewers racing exactly one wins and the other gets ``StaleStateError``.
        """
        chosen = _decision(decision)
        if chosen is HandoverDecision.EDIT:
            if not isinstance(edits, Mapping) or not edits:
                raise ConfigurationError(
                    "edits", edits, "an 'edit' decision needs the fields to change"
                )
        elif edits is not None:
            raise ConfigurationError("edits", edits, f"a {chosen.value!r} decision takes no edits")
        if not isinstance(note, str):
            raise ConfigurationError("note", note, "must be a string")
        by = _optional_text("decided_by", decided_by)
        item_id = id
        seen: list[tuple[HandoverItem, int]] = []  # the item as last read, and its version

        async def attempt(_: int) -> HandoverItem | None:
            record, item = await self._read(item_id)
            seen[:] = [(item, record.version)]
            if item.status.decided:
                return None  # someone decided first: refused below
            decided = HandoverItem.model_validate(
                {
                    **item.model_dump(),
                    "status": chosen.status,
                    "edits": None if edits is None else dict(edits),
                    "note": note,
                    "decided_at": float(self._clock()),
                    "decided_by": by,
                }
            )
            # A lost race (StaleStateError) reads again, and refuses if the winner decided.
            written = await self.store.record_put(
                self.namespace, item_id, _record_value(decided), expected_version=record.version
            )
            return HandoverItem.from_record(written)

        done = await retry_on_conflict(attempt, _DECIDE_ATTEMPTS)
        if done.value is not None:
            return done.value
        item, version = seen[0]
        if item.status.decided:
            raise self._already_decided(item, version)
        # Only reachable if another writer changes a pending item on every attempt.
        raise StaleStateError(record_name(self.namespace, item_id), version, None)

    def _already_decided(self, item: HandoverItem, version: int) -> StaleStateError:
        exc = StaleStateError(record_name(self.namespace, item.id), version - 1, version)
        who = f" by {item.decided_by}" if item.decided_by else ""
        exc.args = (
            f"handover {item.id!r} was already decided ({item.status.value}{who} at "
            f"{item.decided_at}); a handover is decided once",
        )
        return exc


_E = TypeVar("_E", bound=StrEnum)


def _member(kind: type[_E], argument: str, value: _E | str) -> _E:
    """``value`` as a member of the enum ``kind``; a clear error naming the choices if not."""
    try:
        return kind(value)
    except ValueError:
        raise ConfigurationError(
            argument, value, f"must be one of {[m.value for m in kind]}"
        ) from None


def _status(value: HandoverStatus | str) -> HandoverStatus:
    return _member(HandoverStatus, "status", value)


def _decision(value: HandoverDecision | str) -> HandoverDecision:
    return _member(HandoverDecision, "decision", value)
