"""Saga compensation: undo a failed task's committed effects, newest first.

A long-lived transaction made of steps that each commit on their own is undone by running
each step's compensating action in reverse order (Garcia-Molina & Salem 1987, "Sagas").
The ledger knows which effects committed and in which order; this walks them back.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from .._exceptions import LedgerError
from ._action import AtomicAction
from ._effect import EffectRecord, EffectStatus

__all__ = ["CompensationResult", "compensate_task", "describe", "index_actions"]


@dataclass(frozen=True, slots=True)
class CompensationResult:
    """What ``compensate`` did to one committed effect."""

    key: str
    action: str
    status: EffectStatus
    error: str | None = None


class _Ledger(Protocol):
    """The part of ``EffectLedger`` a saga walks (the ledger imports this module)."""

    async def reconcile_pending(
        self, task_id: str, actions: Mapping[str, AtomicAction]
    ) -> list[EffectRecord]: ...

    async def records(self, task_id: str) -> list[EffectRecord]: ...

    async def mark(
        self, record: EffectRecord, status: EffectStatus, *, error: str | None = None
    ) -> EffectRecord: ...


def describe(error: BaseException | str) -> str:
    """An error as the ledger stores it: ``Type: message``."""
    if isinstance(error, str):
        return error
    return f"{type(error).__name__}: {error}"


def index_actions(
    actions: Mapping[str, AtomicAction] | Iterable[AtomicAction],
) -> dict[str, AtomicAction]:
    """Actions by name."""
    if isinstance(actions, Mapping):
        return dict(actions)
    return {action.name: action for action in actions}


async def compensate_task(
    ledger: _Ledger,
    task_id: str,
    actions: Mapping[str, AtomicAction] | Iterable[AtomicAction],
) -> list[CompensationResult]:
    """:meth:`EffectLedger.compensate`: reconcile what is pending, then undo in reverse."""
    index = index_actions(actions)
    await ledger.reconcile_pending(task_id, index)
    todo = [
        r
        for r in await ledger.records(task_id)
        if r.status in (EffectStatus.COMMITTED, EffectStatus.COMPENSATION_FAILED)
    ]
    missing = sorted(
        {r.action for r in todo if r.compensation is not None and r.action not in index}
    )
    if missing:
        raise LedgerError(f"task {task_id!r}: no action registered for {missing}")
    results: list[CompensationResult] = []
    for record in sorted(todo, key=lambda r: r.seq or 0, reverse=True):
        action = index.get(record.action)
        if record.compensation is None or action is None or action.compensation is None:
            results.append(
                CompensationResult(record.key, record.action, record.status, "no compensation")
            )
            continue
        try:
            await action.compensate(record.args, record.result)
        except Exception as exc:
            failed = await ledger.mark(
                record, EffectStatus.COMPENSATION_FAILED, error=describe(exc)
            )
            results.append(
                CompensationResult(record.key, record.action, failed.status, failed.error)
            )
            continue
        done = await ledger.mark(record, EffectStatus.COMPENSATED)
        results.append(CompensationResult(record.key, record.action, done.status))
    return results
