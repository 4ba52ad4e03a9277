"""What one execution returns and the events it passes through."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from .._exceptions import LedgerError
from ._canonical import JSON
from ._effect import EffectClass

__all__ = ["ActionOutcome", "ExecutionEvent", "OutcomeStatus"]


class OutcomeStatus(StrEnum):
    """How one execution ended."""

    SUCCEEDED = "succeeded"
    REPLAYED = "replayed"  # committed earlier: the recorded result, nothing ran
    PRECONDITION_FAILED = "precondition_failed"  # nothing ran
    CONFIRMATION_REQUIRED = "confirmation_required"  # nothing ran
    POSTCONDITION_FAILED = "postcondition_failed"  # ran; compensation was attempted
    TIMED_OUT = "timed_out"
    FAILED = "failed"
    RECONCILIATION_REQUIRED = "reconciliation_required"  # may or may not have happened


@dataclass(frozen=True, slots=True, kw_only=True)
class ActionOutcome:
    """The typed result of :meth:`Executor.execute`."""

    action: str
    task_id: str
    step: int
    effect: EffectClass
    status: OutcomeStatus
    result: Any = None
    attempts: int = 0
    effect_key: str | None = None
    error: BaseException | None = None
    delays_s: tuple[float, ...] = ()
    compensated: bool | None = None

    @property
    def ok(self) -> bool:
        return self.status in (OutcomeStatus.SUCCEEDED, OutcomeStatus.REPLAYED)

    def unwrap(self) -> Any:
        """The result, or raise the error that ended the execution."""
        if self.ok:
            return self.result
        if self.error is not None:
            raise self.error
        raise LedgerError(f"action {self.action!r} ended {self.status} without an error")

    def summary(self) -> dict[str, JSON]:
        """A JSON-ready view for traces (the result is left out; it may be large)."""
        return {
            "action": self.action,
            "task_id": self.task_id,
            "step": self.step,
            "effect": self.effect.value,
            "status": self.status.value,
            "attempts": self.attempts,
            "effect_key": self.effect_key,
            "error": None if self.error is None else f"{type(self.error).__name__}: {self.error}",
            "delays_s": list(self.delays_s),
            "compensated": self.compensated,
        }


@dataclass(frozen=True, slots=True)
class ExecutionEvent:
    """A point in one execution: ``started``, ``claimed``, ``called``, ``committed``,
    ``failed``, ``retrying``, ``replayed``, ``compensated``, and ``waiting`` (another
    owner's claim is being watched). Hooks see them in order."""

    name: str
    action: str
    task_id: str
    step: int
    key: str | None = None
    attempt: int = 0
