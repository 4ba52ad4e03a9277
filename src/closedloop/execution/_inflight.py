"""One execution's bookkeeping, and what it does about an effect another claim holds.

An effect claimed by another owner within its lease is in flight, not abandoned: the
executor watches the ledger entry (a poll under the policy algebra, backing off) until the
claim ends, then answers with its outcome; a claim that outlasts the wait ends the call as
in flight elsewhere.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from .._exceptions import FencedOutError, LedgerError, ReconciliationRequiredError
from .._policy import RetryPolicy, retry_if_result, stop_after_delay
from .._retrying import retry_async
from .._wait import wait_exponential
from ._action import AtomicAction
from ._effect import EffectRecord, EffectStatus
from ._ledger import EffectLedger
from ._outcome import ActionOutcome, OutcomeStatus

__all__ = [
    "DEFAULT_IN_FLIGHT_WAIT_S",
    "Call",
    "Claims",
    "claim_of",
    "fenced_after_call",
    "gone",
    "in_flight",
    "live_claim",
    "watch",
]

DEFAULT_IN_FLIGHT_WAIT_S = 30.0
"""How long an execution watches another owner's live claim before it gives up."""

# A first look soon, then no more than four a second.
_WATCH = wait_exponential(0.005, 2.0, 0.25)


@dataclass(slots=True)
class Call:
    """Per-call bookkeeping of one execution."""

    action: AtomicAction
    args: dict[str, Any]
    task_id: str
    step: int
    policy: RetryPolicy
    key: str | None = None
    attempt: int = 0
    delays: tuple[float, ...] = ()

    def outcome(self, status: OutcomeStatus, **fields: Any) -> ActionOutcome:
        fields.setdefault("attempts", self.attempt)
        return ActionOutcome(
            action=self.action.name,
            task_id=self.task_id,
            step=self.step,
            effect=self.action.effect,
            status=status,
            effect_key=self.key,
            delays_s=self.delays,
            **fields,
        )


def live_claim(ledger: EffectLedger) -> Callable[[EffectRecord], bool]:
    """Whether a claim that beat ours is still running: pending within its lease."""
    return lambda record: record.status is EffectStatus.PENDING and ledger.claims.lease_live(record)


async def watch(
    ledger: EffectLedger,
    record: EffectRecord,
    busy: Callable[[EffectRecord], bool],
    *,
    wait_s: float,
    sleep: Callable[[float], Awaitable[object]],
    clock: Callable[[], float],
) -> EffectRecord | None:
    """Read the entry again while ``busy`` says its claim is still running, for at most
    ``wait_s`` seconds of ``clock``; the last entry read (``None`` if it was removed)."""
    if wait_s <= 0 or not busy(record):
        return record
    key = record.key

    async def look(_: int) -> EffectRecord | None:
        return await ledger.get(key)

    policy = RetryPolicy(
        stop=stop_after_delay(wait_s),
        wait=_WATCH,
        retry=retry_if_result(lambda seen: seen is not None and busy(seen)),
    )
    return (await retry_async(look, policy, sleep=sleep, clock=clock)).unwrap()


def in_flight(
    call: Call, ledger: EffectLedger, record: EffectRecord, wait_s: float
) -> ActionOutcome:
    """The end of a call whose effect another owner's live claim still holds."""
    error = ledger.claims.in_flight(record, f"; still running after {wait_s:g} s of waiting")
    return call.outcome(OutcomeStatus.RECONCILIATION_REQUIRED, error=error, attempts=0)


def gone(call: Call) -> ActionOutcome:
    """The end of a call whose ledger entry disappeared while it was watched."""
    return call.outcome(
        OutcomeStatus.FAILED,
        error=LedgerError(f"effect {call.key!r}: its ledger entry was removed meanwhile"),
    )


def fenced_after_call(call: Call, result: Any, exc: FencedOutError) -> ActionOutcome:
    """The end of a call that ran, but whose claim a takeover replaced before the commit."""
    # The owner that took over reconciles the effect (and should find this one); recording
    # it here would fight that owner.
    error = ReconciliationRequiredError(
        f"effect {call.key!r} ran, but its claim was taken over before the commit "
        f"({exc}); the owner that took it over reconciles it"
    )
    error.__cause__ = exc
    return call.outcome(OutcomeStatus.RECONCILIATION_REQUIRED, result=result, error=error)


@dataclass(slots=True)
class Claims:
    """What the tries of one once-effect call share: the claim a new one builds on, and
    one made before any read, which the first try uses."""

    claimed: EffectRecord | None
    first: EffectRecord | None


def claim_of(run: Call) -> dict[str, Any]:
    """The ledger's arguments naming ``run``'s entry (to claim it or record it committed)."""
    assert run.key is not None
    return {
        "key": run.key,
        "task_id": run.task_id,
        "step": run.step,
        "action": run.action,
        "args": run.args,
    }
