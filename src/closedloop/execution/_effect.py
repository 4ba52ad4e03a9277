"""The effect vocabulary: what running an action twice does, and where one effect stands.

:class:`EffectClass` is part of an action's contract; :class:`EffectStatus` and
:class:`EffectRecord` are what the effect ledger stores for each claimed effect. They sit
below both the action contract and the ledger, so neither has to import the other's
internals.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["EffectClass", "EffectRecord", "EffectStatus"]


class EffectClass(StrEnum):
    """What running an action twice does to the world: recomputable, once or irreversible."""

    RECOMPUTABLE = "recomputable"  # no lasting effect: classify, summarise, draft
    OVERWRITABLE = "overwritable"  # writes the same value again: set a field, upsert
    ONCE = "once"  # must happen at most once: send a notification
    IRREVERSIBLE = "irreversible"  # cannot be undone by rerunning: pay, delete

    @property
    def needs_ledger(self) -> bool:
        """Only effects whose repetition is harmless may be retried without the ledger."""
        return self in (EffectClass.ONCE, EffectClass.IRREVERSIBLE)


class EffectStatus(StrEnum):
    """Where one effect stands."""

    PENDING = "pending"  # claimed; the call may or may not have reached the world
    COMMITTED = "committed"  # happened; the result is recorded
    FAILED = "failed"  # did not happen; may be tried again
    COMPENSATED = "compensated"  # happened and was undone
    COMPENSATION_FAILED = "compensation_failed"  # happened; undoing it failed (retryable)


class EffectRecord(BaseModel):
    """One ledger entry, as stored (JSON) in the state store's ``ledger`` namespace.

    A claim names its ``owner`` (a run or a worker), holds a lease until
    ``lease_expires_at`` (wall-clock seconds) and carries ``fence``, a fencing token that
    grows by one with every new claim of the key (a retry after a failure, a takeover of
    an expired lease). Entries written before claims had owners load with no owner, no
    lease and token 0: nobody holds them.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    key: str
    task_id: str
    step: int
    action: str
    effect: EffectClass
    status: EffectStatus
    args: dict[str, Any]
    result: Any = None
    error: str | None = None
    attempts: int = 0
    seq: int | None = None
    compensation: str | None = None
    note: str | None = None
    owner: str | None = None
    fence: int = 0
    lease_expires_at: float | None = None
    version: int = Field(default=0, exclude=True)
