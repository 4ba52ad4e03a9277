"""One entry point that ties contract, retry, timeout and ledger together.

Expected failures of the world (a precondition that does not hold, a timeout, a refused
call, an effect pending reconciliation) come back as an :class:`ActionOutcome` the loop can
reason about; programming errors (a bad argument, a ``TypeError`` in the action) raise.
"""

from __future__ import annotations

import asyncio
import functools
import random
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, TypeVar

from .._exceptions import (
    ActionTimeoutError,
    ConfigurationError,
    ConfirmationRequiredError,
    FencedOutError,
    LedgerError,
    PreconditionFailedError,
    ReconciliationRequiredError,
    StaleStateError,
)
from .._policy import RetryPolicy
from .._policy_state import PROGRAMMING_ERRORS, PolicyDecision, PolicyState
from .._retrying import Retried, retry_async
from .._validation import require_non_negative
from ._action import AtomicAction, Confirmation, call_maybe_async
from ._canonical import effect_key
from ._effect import EffectRecord, EffectStatus
from ._inflight import (
    DEFAULT_IN_FLIGHT_WAIT_S,
    Call,
    Claims,
    claim_of,
    fenced_after_call,
    gone,
    in_flight,
    live_claim,
    watch,
)
from ._ledger import EffectLedger
from ._outcome import ActionOutcome, ExecutionEvent, OutcomeStatus
from ._saga import CompensationResult

__all__ = ["EventHook", "Executor", "Sleep"]


T = TypeVar("T")

EventHook = Callable[[ExecutionEvent], Awaitable[None] | None]
Sleep = Callable[[float], Awaitable[None]]


class Executor:
    """Runs actions under their contracts; ``once``/``irreversible`` ones through a ledger.

    ``sleep``, ``clock`` and ``rng`` are injected so retries are deterministic in tests; ``on_event``
    sees each step of an execution (tracing, and the crash tests' fault injection).
    Every executed action is remembered by name so :meth:`resume` and :meth:`compensate`
    can find reconcilers and compensations; register others up front with ``actions``.
    With a ledger, the arguments of recorded actions (``once``/``irreversible``, or with a
    compensation) must be JSON data: they are what a restarted process compensates with.

    An effect another owner has claimed and is still within its lease is watched for up
    to ``in_flight_wait_s`` seconds (on ``clock``, backing off through ``sleep``): its
    commit is replayed here, an expired lease is reconciled; still in flight after that,
    the call ends ``reconciliation_required`` with :class:`EffectInFlightError`.
    """

    def __init__(
        self,
        ledger: EffectLedger | None = None,
        *,
        sleep: Sleep = asyncio.sleep,
        rng: random.Random | None = None,
        on_event: EventHook | None = None,
        actions: Iterable[AtomicAction] = (),
        clock: Callable[[], float] = time.monotonic,
        in_flight_wait_s: float = DEFAULT_IN_FLIGHT_WAIT_S,
    ) -> None:
        self.ledger = ledger
        self.in_flight_wait_s = require_non_negative("in_flight_wait_s", in_flight_wait_s)
        self._sleep = sleep
        self._clock = clock
        self._rng = rng if rng is not None else random.Random()
        self._on_event = on_event
        self._actions: dict[str, AtomicAction] = {}
        self.register(*actions)

    def register(self, *actions: AtomicAction) -> None:
        """Make actions known for reconciliation and compensation after a restart."""
        for action in actions:
            if not isinstance(action, AtomicAction):
                raise ConfigurationError("actions", action, "must be AtomicAction instances")
            self._actions[action.name] = action

    @property
    def actions(self) -> Mapping[str, AtomicAction]:
        return dict(self._actions)

    async def resume(self, task_id: str) -> list[EffectRecord]:
        """Reconcile a task's pending effects; call before anything else on resume."""
        return await self._require_ledger("resume").reconcile_pending(task_id, self._actions)

    async def compensate(self, task_id: str) -> list[CompensationResult]:
        """Undo a failed task's committed effects in reverse order (saga)."""
        return await self._require_ledger("compensate").compensate(task_id, self._actions)

    async def execute(
        self,
        action: AtomicAction,
        args: Mapping[str, Any] | None = None,
        *,
        task_id: str,
        step: int,
        confirmation: Confirmation | None = None,
        retry: RetryPolicy | None = None,
        state: Mapping[str, Any] | None = None,
    ) -> ActionOutcome:
        """Run ``action(**args)`` as step ``step`` of task ``task_id``.

        ``retry`` overrides the action's policy for this call; ``state`` is what the
        preconditions see besides the arguments.
        """
        if not isinstance(action, AtomicAction):
            raise ConfigurationError("action", action, "must be an AtomicAction")
        if args is not None and not isinstance(args, Mapping):
            raise ConfigurationError("args", args, "must be a mapping of argument names")
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise ConfigurationError("retry", retry, "must be a RetryPolicy or None")
        if confirmation is not None and not isinstance(confirmation, Confirmation):
            raise ConfigurationError("confirmation", confirmation, "must be a Confirmation")
        run = Call(action, dict(args or {}), task_id, step, retry or action.retry)
        self.register(action)
        ledger = self.ledger
        needs_record = action.effect.needs_ledger or action.compensation is not None
        if ledger is not None and needs_record:
            run.key = ledger.key_for(task_id, step, action.name, run.args, action.volatile_fields)
        else:
            effect_key(task_id, step, action.name, {})  # same checks on task_id and step
        await self._emit("started", run)
        if action.effect.needs_ledger:
            if ledger is None:
                raise ConfigurationError(
                    "ledger", None, f"{action.effect} action {action.name!r} needs an EffectLedger"
                )
            return await self._run_once(run, ledger, confirmation, state)
        return await self._run_repeatable(run, confirmation, state)

    # --- repeatable effects: retried blindly -----------------------------------------------

    async def _run_repeatable(
        self, run: Call, confirmation: Confirmation | None, state: Mapping[str, Any] | None
    ) -> ActionOutcome:
        blocked = await self._gate(run, confirmation, state)
        if blocked is not None:
            return blocked

        async def attempt(n: int) -> Any:
            run.attempt = n
            try:
                result = await run.action.invoke(run.args)
            except PROGRAMMING_ERRORS:
                raise
            except Exception:
                await self._emit("failed", run)
                raise
            await self._emit("called", run)
            return result

        retried = await self._retry(run, attempt)
        if retried.error is not None:
            return self._failure(run, retried.error)
        result = retried.value
        outcome = await self._check_result(run, result, None)
        if outcome.ok and self.ledger is not None and run.key is not None:
            await self.ledger.record_committed(**claim_of(run), result=result, attempts=run.attempt)
            await self._emit("committed", run)
        return outcome

    # --- once / irreversible: claimed, committed, never repeated ----------------------------

    async def _run_once(
        self,
        run: Call,
        ledger: EffectLedger,
        confirmation: Confirmation | None,
        state: Mapping[str, Any] | None,
    ) -> ActionOutcome:
        assert run.key is not None
        first = await self._claim_first(run, ledger)
        record = None if first is not None else await ledger.get(run.key)
        if record is not None:
            known = await self._earlier(run, ledger, record)
            if isinstance(known, ActionOutcome):
                return known
            record = known
        blocked = await self._gate(run, confirmation, state)
        if blocked is not None:
            return blocked
        claims = Claims(claimed=record, first=first)
        retried = await self._retry(run, functools.partial(self._try_once, run, ledger, claims))
        if retried.error is not None:
            return self._failure(run, retried.error)
        return retried.unwrap()

    async def _claim_first(self, run: Call, ledger: EffectLedger) -> EffectRecord | None:
        """Claim before any read when nothing is checked first (the claim is a conditional
        insert, so a key seen before costs a read only then): one store trip, not two."""
        action = run.action
        if action.requires_confirmation or action.preconditions:
            return None
        try:
            return await ledger.claim(**claim_of(run), attempts=1)
        except Exception:
            # An entry is there (a lost conditional insert), or the claim was refused (an
            # unstorable argument): read and claim as before, where a refused claim is a
            # failed try of the retry loop.
            return None

    async def _earlier(
        self, run: Call, ledger: EffectLedger, record: EffectRecord
    ) -> ActionOutcome | EffectRecord:
        """What an entry left by an earlier call decides: its outcome replayed, a refusal,
        or the (settled) entry a new claim builds on."""
        if record.status is EffectStatus.PENDING:
            settled = await self._settle(run, ledger, record, "is pending from an earlier run")
            if isinstance(settled, ActionOutcome):
                return settled
            record = settled
        if record.status is EffectStatus.COMMITTED:
            return await self._replay(run, record)
        if record.status is not EffectStatus.FAILED:
            return run.outcome(
                OutcomeStatus.FAILED,
                error=LedgerError(
                    f"effect {run.key!r} was committed and is now {record.status}; "
                    "doing it again needs a new task id or step"
                ),
            )
        return record

    async def _try_once(
        self, run: Call, ledger: EffectLedger, claims: Claims, n: int
    ) -> ActionOutcome:
        """One claim and one call; an outcome is the end, an exception a failed try."""
        run.attempt = n
        try:
            current = await self._claim_try(run, ledger, claims, n)
        except StaleStateError as exc:
            # Another claim holds the key (a claim at the same moment, or a takeover since
            # ours): watch it and answer with its outcome, never call as well.
            watched = await self._watch_other(run, ledger, exc)
            if isinstance(watched, ActionOutcome):
                return watched
            claims.claimed = watched  # it failed: this try failed too, the next claims anew
            raise LedgerError(f"effect {run.key!r}: the claim that won failed") from exc
        claims.claimed = current
        return await self._call_claimed(run, ledger, claims, current, n)

    async def _claim_try(
        self, run: Call, ledger: EffectLedger, claims: Claims, n: int
    ) -> EffectRecord:
        if claims.first is not None:  # claimed before any read
            current, claims.first = claims.first, None
        else:
            current = await ledger.claim(**claim_of(run), attempts=n, previous=claims.claimed)
        await self._emit("claimed", run)
        # The last look before the world changes: still this claim, lease live.
        return await ledger.check_fence(current)

    async def _call_claimed(
        self, run: Call, ledger: EffectLedger, claims: Claims, current: EffectRecord, n: int
    ) -> ActionOutcome:
        """The call under a live claim, and the ledger written with what it did."""
        action = run.action
        try:
            result = await action.invoke(run.args)
        except action.uncertain_errors as exc:
            why = f"ended in {type(exc).__name__}: {exc}"
            resolved = await self._reconcile(run, ledger, current, why, exc)
            if isinstance(resolved, ActionOutcome):
                return resolved
            claims.claimed = resolved
            if resolved.status is EffectStatus.COMMITTED:
                await self._emit("committed", run)
                return await self._check_result(run, resolved.result, resolved)
            failure: Exception = exc
        except PROGRAMMING_ERRORS as exc:
            await ledger.fail(current, exc, attempts=n)
            raise
        except Exception as exc:
            claims.claimed = await ledger.fail(current, exc, attempts=n)
            failure = exc
        else:
            await self._emit("called", run)
            try:
                committed = await ledger.commit(current, result, attempts=n)
            except FencedOutError as exc:
                return fenced_after_call(run, result, exc)
            await self._emit("committed", run)
            return await self._check_result(run, result, committed)
        await self._emit("failed", run)
        raise failure

    async def _replay(self, run: Call, record: EffectRecord) -> ActionOutcome:
        await self._emit("replayed", run)
        return run.outcome(OutcomeStatus.REPLAYED, result=record.result, attempts=0)

    async def _settle(
        self, run: Call, ledger: EffectLedger, record: EffectRecord, why: str
    ) -> EffectRecord | ActionOutcome:
        """A pending entry found before claiming: another owner's live claim is watched,
        an abandoned one (lease expired, or this owner's own) reconciled."""
        if ledger.claims.held_elsewhere(record):
            watched = await self._watch(run, ledger, record, ledger.claims.held_elsewhere)
            if watched is None:
                return gone(run)
            if ledger.claims.held_elsewhere(watched):
                return in_flight(run, ledger, watched, self.in_flight_wait_s)
            if watched.status is not EffectStatus.PENDING:
                return watched
            record, why = watched, "was pending when its lease expired"
        return await self._reconcile(run, ledger, record, why)

    async def _watch_other(
        self, run: Call, ledger: EffectLedger, lost: StaleStateError
    ) -> EffectRecord | ActionOutcome:
        """After losing the key to another claim: its outcome once it ends (a commit is
        replayed), the claim that failed, a reconciliation once its lease ran out, or in
        flight if it outlasts the wait."""
        assert run.key is not None
        current = await ledger.get(run.key)
        if current is None:
            return gone(run)
        watched = await self._watch(run, ledger, current, live_claim(ledger))
        if watched is None:
            return gone(run)
        if watched.status is EffectStatus.PENDING and not ledger.claims.lease_live(watched):
            why = "was pending when its lease expired"
            resolved = await self._reconcile(run, ledger, watched, why)
            if isinstance(resolved, ActionOutcome):
                return resolved
            watched = resolved
        if watched.status is EffectStatus.COMMITTED:
            return await self._replay(run, watched)
        if watched.status is EffectStatus.FAILED:
            return watched
        if watched.status is EffectStatus.PENDING:
            outcome = in_flight(run, ledger, watched, self.in_flight_wait_s)
            assert outcome.error is not None
            outcome.error.__cause__ = lost
            return outcome
        return run.outcome(
            OutcomeStatus.FAILED,
            error=LedgerError(f"effect {run.key!r} was claimed elsewhere and is {watched.status}"),
        )

    async def _watch(
        self,
        run: Call,
        ledger: EffectLedger,
        record: EffectRecord,
        busy: Callable[[EffectRecord], bool],
    ) -> EffectRecord | None:
        if self.in_flight_wait_s > 0 and busy(record):
            await self._emit("waiting", run)
        return await watch(
            ledger, record, busy, wait_s=self.in_flight_wait_s, sleep=self._sleep, clock=self._clock
        )

    async def _reconcile(
        self,
        run: Call,
        ledger: EffectLedger,
        record: EffectRecord,
        why: str,
        cause: BaseException | None = None,
    ) -> EffectRecord | ActionOutcome:
        """Resolve a pending effect, or the outcome saying it needs a reconciliation."""
        action = run.action
        if action.reconciler is None:
            problem = f"and {action.name!r} has no reconciler"
        else:
            try:
                return await ledger.reconcile(record, action)
            except PROGRAMMING_ERRORS:
                raise
            except StaleStateError as exc:
                # Another claimant took the claim over first: its outcome is this call's.
                return await self._watch_other(run, ledger, exc)
            except Exception as exc:
                problem = f"and its reconciler failed ({type(exc).__name__}: {exc})"
                cause = exc
        error = ReconciliationRequiredError(
            f"effect {run.key!r} {why}: it may or may not have been applied, {problem}; "
            "it stays pending"
        )
        error.__cause__ = cause
        return run.outcome(OutcomeStatus.RECONCILIATION_REQUIRED, error=error)

    # --- shared steps --------------------------------------------------------------------------

    async def _gate(
        self, run: Call, confirmation: Confirmation | None, state: Mapping[str, Any] | None
    ) -> ActionOutcome | None:
        action = run.action
        if action.requires_confirmation and (
            confirmation is None or not confirmation.covers(action.name)
        ):
            return run.outcome(
                OutcomeStatus.CONFIRMATION_REQUIRED,
                error=ConfirmationRequiredError(
                    f"action {action.name!r} needs a human confirmation before it runs"
                ),
            )
        try:
            await action.check_preconditions(run.args, state)
        except PreconditionFailedError as exc:
            return run.outcome(OutcomeStatus.PRECONDITION_FAILED, error=exc)
        return None

    async def _retry(self, run: Call, attempt: Callable[[int], Awaitable[T]]) -> Retried[T]:
        """The one retry loop, under the call's policy; each retry is an event."""

        async def before_sleep(state: PolicyState, decision: PolicyDecision) -> None:
            run.delays = (*run.delays, decision.delay_s)
            await self._emit("retrying", run)

        return await retry_async(
            attempt,
            run.policy,
            sleep=self._sleep,
            clock=self._clock,
            rng=self._rng,
            before_sleep=before_sleep,
        )

    def _failure(self, run: Call, error: BaseException) -> ActionOutcome:
        status = (
            OutcomeStatus.TIMED_OUT
            if isinstance(error, ActionTimeoutError)
            else OutcomeStatus.FAILED
        )
        return run.outcome(status, error=error)

    async def _check_result(
        self, run: Call, result: Any, record: EffectRecord | None
    ) -> ActionOutcome:
        action = run.action
        reason = await action.postcondition_failure(result, run.args)
        if reason is None:
            return run.outcome(OutcomeStatus.SUCCEEDED, result=result)
        compensated: bool | None = None
        comp_error: str | None = None
        if action.compensation is not None:
            try:
                await action.compensate(run.args, result)
                compensated = True
            except Exception as exc:
                compensated = False
                comp_error = f"{type(exc).__name__}: {exc}"
            if self.ledger is not None and record is not None:
                status = (
                    EffectStatus.COMPENSATED if compensated else EffectStatus.COMPENSATION_FAILED
                )
                await self.ledger.mark(record, status, error=comp_error)
            await self._emit("compensated", run)
        return run.outcome(
            OutcomeStatus.POSTCONDITION_FAILED,
            result=result,
            error=action.postcondition_error(reason, compensated),
            compensated=compensated,
        )

    async def _emit(self, name: str, run: Call) -> None:
        if self._on_event is not None:
            event = ExecutionEvent(
                name, run.action.name, run.task_id, run.step, run.key, run.attempt
            )
            await call_maybe_async(self._on_event, event)

    def _require_ledger(self, what: str) -> EffectLedger:
        if self.ledger is None:
            raise ConfigurationError("ledger", None, f"{what} needs an EffectLedger")
        return self.ledger
