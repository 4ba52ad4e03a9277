"""The effect ledger: which effects of a task reached the world, kept in the state store.

Retrying a classification costs tokens; retrying a payment is an incident. Every
``once``/``irreversible`` effect is claimed in the store (``pending``) before it runs and
marked ``committed`` with its result after, so a replay returns the recorded result instead
of acting again. A crash between the call and the commit leaves ``pending``: the effect may
or may not have happened, and only the outside world can say which (a reconciler).

A claim carries its owner, a lease and a fencing token (see ``_claims``): a pending entry
whose owner is alive and within its lease is an effect in flight, never reconciled as
abandoned; a takeover takes the next token first, so the owner it replaced is fenced out.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .._conflict import retry_on_conflict
from .._exceptions import (
    ConfigurationError,
    FencedOutError,
    LedgerError,
    ReconciliationRequiredError,
    StaleStateError,
)
from .._policy import retry_if_result
from .._policy_state import PROGRAMMING_ERRORS
from .._records import FencedStore, RecordStore, StoredRecord
from ._action import AtomicAction, Reconciliation, call_maybe_async
from ._canonical import DEFAULT_VOLATILE_FIELDS, JSON, effect_key, normalise
from ._claims import DEFAULT_LEASE_S, ClaimRules, default_owner
from ._effect import EffectRecord, EffectStatus
from ._saga import CompensationResult, compensate_task, describe, index_actions

__all__ = [
    "EffectLedger",
]

_SEQ_CAS_ATTEMPTS = 64
# A commit whose counter moved under it answers None and takes the next number.
_COUNTER_MOVED = retry_if_result(lambda committed: committed is None)


def _thaw(value: Any) -> Any:
    # Stores hand back read-only views (MappingProxyType, tuples); records want plain JSON.
    if isinstance(value, Mapping):
        return {str(k): _thaw(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_thaw(v) for v in value]
    return value


class EffectLedger:
    """Idempotency keys, claims, commits, reconciliation and saga compensation for a store.

    ``volatile_fields`` are argument names (at any depth) left out of the idempotency key:
    timestamps and request ids change between a call and its retry without changing what
    the call does.

    ``owner`` names who claims through this ledger (a run id, a worker; default: this
    process and a random tag). A restarted worker that gives the same owner may resolve
    its own pending claims at once; another owner's claim waits for its lease, ``lease_s``
    seconds from the claim on ``clock`` (wall-clock seconds, shared across processes).
    """

    def __init__(
        self,
        store: RecordStore,
        namespace: str = "ledger",
        *,
        volatile_fields: Iterable[str] = DEFAULT_VOLATILE_FIELDS,
        owner: str | None = None,
        lease_s: float = DEFAULT_LEASE_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not isinstance(namespace, str) or not namespace:
            raise ConfigurationError("namespace", namespace, "must be a non-empty string")
        self.store = store
        self.namespace = namespace
        self.volatile_fields = frozenset(volatile_fields)
        self.claims = ClaimRules(default_owner() if owner is None else owner, lease_s, clock)
        self._seq: dict[str, tuple[int, int]] = {}  # task id -> (commit seq, record version)

    # --- keys and reads ------------------------------------------------------------------

    def key_for(
        self,
        task_id: str,
        step: int,
        action: str,
        args: Mapping[str, Any],
        extra_volatile: Iterable[str] = (),
    ) -> str:
        """The idempotency key of ``action(**args)`` at ``step`` of ``task_id``."""
        return effect_key(task_id, step, action, args, self.volatile_fields | set(extra_volatile))

    async def get(self, key: str) -> EffectRecord | None:
        """The entry under ``key``, or ``None``."""
        stored = await self.store.record_get(self.namespace, key)
        return None if stored is None else self._load(stored)

    async def records(self, task_id: str) -> list[EffectRecord]:
        """Every entry of a task, committed ones in commit order, then the rest by key."""
        stored = await self.store.record_list(self.namespace, prefix=f"{task_id}/")
        loaded = [self._load(item) for item in stored]
        return sorted(loaded, key=lambda r: (r.seq is None, r.seq or 0, r.key))

    async def pending(self, task_id: str) -> list[EffectRecord]:
        """The task's entries that may or may not have reached the world."""
        return [r for r in await self.records(task_id) if r.status is EffectStatus.PENDING]

    @property
    def owner(self) -> str:
        """Who claims through this ledger."""
        return self.claims.owner

    # --- writes ----------------------------------------------------------------------------

    def _new_record(
        self,
        key: str,
        task_id: str,
        step: int,
        action: AtomicAction,
        args: Mapping[str, Any],
        status: EffectStatus,
        **fields: Any,
    ) -> EffectRecord:
        """A fresh entry for ``action`` run with ``args``; ``fields`` fill in the rest."""
        return EffectRecord(
            key=key,
            task_id=task_id,
            step=step,
            action=action.name,
            effect=action.effect,
            status=status,
            args=self._stored_args(args),
            compensation=action.compensation_name,
            **fields,
        )

    async def claim(
        self,
        *,
        key: str,
        task_id: str,
        step: int,
        action: AtomicAction,
        args: Mapping[str, Any],
        attempts: int,
        previous: EffectRecord | None = None,
    ) -> EffectRecord:
        """Atomically mark an effect ``pending`` before it runs, under this ledger's lease.

        ``previous`` is the ``failed`` entry being retried, or ``None`` for a first claim
        (a conditional insert, fencing token 1); a retry takes the next token. Raises
        :class:`StaleStateError` when another worker got there first.
        """
        if previous is not None and previous.status is not EffectStatus.FAILED:
            raise LedgerError(f"effect {key!r} is {previous.status}; only failed ones re-run")
        record = self._new_record(
            key,
            task_id,
            step,
            action,
            args,
            EffectStatus.PENDING,
            attempts=attempts,
            fence=1 if previous is None else previous.fence + 1,
            **self.claims.lease(),
        )
        if previous is None:
            return await self._write(record, 0)
        return await self._write_fenced(record, previous)

    async def take_over(self, record: EffectRecord) -> EffectRecord:
        """Hold a pending claim whose lease expired (or this owner's own) under a new token.

        The claim's previous owner is fenced out from here on: its check before the call
        and its commit both fail. Raises :class:`EffectInFlightError` while another owner's
        lease is live, :class:`FencedOutError` if someone else took it over first.
        """
        if record.status is not EffectStatus.PENDING:
            raise LedgerError(f"effect {record.key!r} is {record.status}; only pending is held")
        if self.claims.held_elsewhere(record):
            raise self.claims.in_flight(record)
        taken = record.model_copy(update={"fence": record.fence + 1, **self.claims.lease()})
        return await self._write_fenced(taken, record)

    async def check_fence(self, record: EffectRecord) -> EffectRecord:
        """Before the call: the claim is still this one (same token), its lease renewed if it
        ran out meanwhile; :class:`FencedOutError` if a newer claim took the key over."""
        stored = await self.store.record_get(self.namespace, record.key)
        if stored is not None and stored.version == record.version:
            # Every write moves the version, so the entry is still exactly ``record``:
            # same token, owner and status; nothing to load and compare field by field.
            current: EffectRecord | None = record
        else:
            current = None if stored is None else self._load(stored)
        name = f"{self.namespace}/{record.key}"
        if (
            current is None
            or current.status is not EffectStatus.PENDING
            or current.fence != record.fence
            or current.owner != record.owner
        ):
            raise FencedOutError(name, record.fence, None if current is None else current.fence)
        if self.claims.lease_live(current):
            return current
        renewed = current.model_copy(update=self.claims.lease())
        return await self._write_fenced(renewed, current)

    async def commit(
        self, record: EffectRecord, result: Any, *, attempts: int | None = None, note: str = ""
    ) -> EffectRecord:
        """Mark a claimed effect ``committed`` with its result and a commit sequence number."""
        stored_result, unstorable = self._stored_result(result)
        notes = [n for n in (note, unstorable) if n]
        fields = {
            "status": EffectStatus.COMMITTED,
            "result": stored_result,
            "error": None,
            "attempts": record.attempts if attempts is None else attempts,
            "note": "; ".join(notes) or None,
        }
        if getattr(type(self.store), "record_put_many", None) is not None:
            return await self._commit_with_seq(record, fields)
        updated = record.model_copy(update={**fields, "seq": await self._next_seq(record.task_id)})
        return await self._write_fenced(updated, record)

    async def _commit_with_seq(
        self, record: EffectRecord, fields: Mapping[str, Any]
    ) -> EffectRecord:
        """Take the sequence number and commit the entry in one write (one durable commit).

        A lost race on the counter is retried; a lost race on the entry itself is another
        worker's commit and raises, as a plain commit would. The entry is compared on its
        version, which every write moves (a takeover's included), so an owner fenced out
        since its claim fails here just as on its token.
        """
        namespace = f"{self.namespace}.seq"

        async def attempt(_: int) -> EffectRecord | None:
            # The counter as this ledger last wrote it saves a read per commit; if another
            # writer moved it since, the compare-and-set below fails and it is read afresh.
            known = self._seq.pop(record.task_id, None)
            if known is None:
                current = await self.store.record_get(namespace, record.task_id)
                known = (0, 0) if current is None else (int(current.value["seq"]), current.version)
            seq = known[0] + 1
            updated = record.model_copy(update={**fields, "seq": seq})
            try:
                stored = await self.store.record_put_many(  # type: ignore[attr-defined]
                    [
                        (namespace, record.task_id, {"seq": seq}, known[1]),
                        (
                            self.namespace,
                            record.key,
                            updated.model_dump(mode="json"),
                            record.version,
                        ),
                    ]
                )
            except StaleStateError:
                entry = await self.store.record_get(self.namespace, record.key)
                if entry is None or entry.version != record.version:
                    token = None if entry is None else self._load(entry).fence
                    if token is not None and token != record.fence:
                        name = f"{self.namespace}/{record.key}"
                        raise FencedOutError(name, record.fence, token) from None
                    raise
                return None  # only the counter moved: take the next number
            self._seq[record.task_id] = (seq, stored[0].version)
            return updated.model_copy(update={"version": stored[1].version})

        committed = (
            await retry_on_conflict(attempt, _SEQ_CAS_ATTEMPTS, conflict=_COUNTER_MOVED)
        ).value
        if committed is not None:
            return committed
        raise LedgerError(f"task {record.task_id!r}: could not take a commit sequence number")

    async def record_committed(
        self,
        *,
        key: str,
        task_id: str,
        step: int,
        action: AtomicAction,
        args: Mapping[str, Any],
        result: Any,
        attempts: int,
    ) -> EffectRecord:
        """Record a repeatable effect that already ran, so a saga can compensate it."""
        stored_result, unstorable = self._stored_result(result)
        record = self._new_record(
            key,
            task_id,
            step,
            action,
            args,
            EffectStatus.COMMITTED,
            result=stored_result,
            attempts=attempts,
            seq=await self._next_seq(task_id),
            note=unstorable or None,
        )
        # Rerunning a repeatable effect overwrites its entry: it is the same effect again.
        return await self._write(record, None)

    async def fail(
        self, record: EffectRecord, error: BaseException | str, *, attempts: int | None = None
    ) -> EffectRecord:
        """Mark a claimed effect ``failed``: it did not reach the world."""
        updated = record.model_copy(
            update={
                "status": EffectStatus.FAILED,
                "error": describe(error),
                "attempts": record.attempts if attempts is None else attempts,
            }
        )
        return await self._write_fenced(updated, record)

    async def mark(
        self, record: EffectRecord, status: EffectStatus, *, error: str | None = None
    ) -> EffectRecord:
        """Move an entry to ``status`` (compare-and-set on its fencing token)."""
        updated = record.model_copy(update={"status": status, "error": error})
        return await self._write_fenced(updated, record)

    # --- recovery --------------------------------------------------------------------------

    async def reconcile(self, record: EffectRecord, action: AtomicAction) -> EffectRecord:
        """Ask ``action.reconciler`` whether a pending effect happened and record the answer.

        Only an abandoned claim is asked about: one whose lease expired, or this owner's
        own. The claim is taken over first (the next fencing token), so its previous owner,
        if it was only slow, can no longer call or commit. Raises
        :class:`EffectInFlightError` for a live claim of another owner.
        """
        if record.status is not EffectStatus.PENDING:
            return record
        if self.claims.held_elsewhere(record):
            raise self.claims.in_flight(record, "; it is not abandoned, so it is not reconciled")
        if action.reconciler is None:
            raise ReconciliationRequiredError(
                f"effect {record.key!r} ({record.action}) is pending: it may or may not have "
                "been applied, and the action has no reconciler"
            )
        record = await self.take_over(record)
        verdict = await call_maybe_async(action.reconciler, record.args, record)
        if not isinstance(verdict, Reconciliation):
            raise ConfigurationError(
                "reconciler", verdict, f"{action.name}'s reconciler must return a Reconciliation"
            )
        if verdict.applied:
            return await self.commit(record, verdict.result, note="reconciled: applied")
        return await self.fail(record, "reconciled: not applied")

    async def reconcile_pending(
        self,
        task_id: str,
        actions: Mapping[str, AtomicAction] | Iterable[AtomicAction] = (),
    ) -> list[EffectRecord]:
        """Resolve every pending effect of a task; run this first when a task resumes.

        Returns the resolved entries. Raises :class:`ReconciliationRequiredError` naming the
        keys no reconciler could resolve (the others are resolved first).
        """
        index = index_actions(actions)
        resolved: list[EffectRecord] = []
        unresolved: list[str] = []
        for record in await self.pending(task_id):
            action = index.get(record.action)
            if self.claims.held_elsewhere(record):
                unresolved.append(
                    f"{record.key} (in flight elsewhere: {self.claims.holder(record)})"
                )
                continue
            if action is None or action.reconciler is None:
                unresolved.append(f"{record.key} (no reconciler)")
                continue
            try:
                resolved.append(await self.reconcile(record, action))
            except PROGRAMMING_ERRORS:
                raise
            except Exception as exc:
                # The outside world could not be asked now; the effect stays pending.
                unresolved.append(f"{record.key} (reconciler failed: {describe(exc)})")
        if unresolved:
            raise ReconciliationRequiredError(
                f"task {task_id!r}: {len(unresolved)} effect(s) still pending: "
                + ", ".join(unresolved)
            )
        return resolved

    async def compensate(
        self,
        task_id: str,
        actions: Mapping[str, AtomicAction] | Iterable[AtomicAction],
    ) -> list[CompensationResult]:
        """Undo a failed task's committed effects in reverse commit order (a saga).

        Pending effects are reconciled first. A failing compensation is recorded as
        ``compensation_failed`` and the rest still run; calling again retries it, so
        compensations should be idempotent. Effects without a compensation are reported as
        still ``committed``.
        """
        return await compensate_task(self, task_id, actions)

    # --- internals -------------------------------------------------------------------------

    def _load(self, stored: StoredRecord) -> EffectRecord:
        return EffectRecord.model_validate({**_thaw(stored.value), "version": stored.version})

    async def _write(self, record: EffectRecord, expected_version: int | None) -> EffectRecord:
        value = record.model_dump(mode="json")
        stored = await self.store.record_put(
            self.namespace, record.key, value, expected_version=expected_version
        )
        return record.model_copy(update={"version": stored.version})

    async def _write_fenced(self, record: EffectRecord, previous: EffectRecord) -> EffectRecord:
        """Write ``record`` over ``previous`` only if the stored token is still previous's.

        The store compares the token itself where it can (``record_put_fenced``); any
        other store compares the version, which every write moves, a takeover's included.
        """
        # Looked up on the type, as record_put_many is: a wrapper that only forwards
        # unknown attributes keeps the plain protocol (and sees every write).
        if getattr(type(self.store), "record_put_fenced", None) is None:
            return await self._write(record, previous.version)
        store: FencedStore = self.store  # type: ignore[assignment]
        stored = await store.record_put_fenced(
            self.namespace, record.key, record.model_dump(mode="json"), token=previous.fence
        )
        return record.model_copy(update={"version": stored.version})

    def _stored_args(self, args: Mapping[str, Any]) -> dict[str, JSON]:
        plain = normalise(args, coerce_integral=False)
        assert isinstance(plain, dict)  # normalise keeps a mapping a mapping
        return plain

    @staticmethod
    def _stored_result(result: Any) -> tuple[JSON, str]:
        # The effect has happened by now: an unstorable result must not block the commit,
        # or a replay would run the effect again.
        try:
            return normalise(result, coerce_integral=False, path="result"), ""
        except ConfigurationError as exc:
            return None, f"result not stored: {exc}"

    async def _next_seq(self, task_id: str) -> int:
        namespace = f"{self.namespace}.seq"

        async def attempt(_: int) -> int:
            current = await self.store.record_get(namespace, task_id)
            seq = 1 if current is None else int(current.value["seq"]) + 1
            await self.store.record_put(
                namespace,
                task_id,
                {"seq": seq},
                expected_version=0 if current is None else current.version,
            )
            return seq

        taken = await retry_on_conflict(attempt, _SEQ_CAS_ATTEMPTS)
        if taken.ok:
            return taken.unwrap()
        raise LedgerError(f"task {task_id!r}: could not take a commit sequence number")
