"""The effect ledger on real stores (memory and a SQLite file): never twice, saga undo."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from closedloop import LedgerError, ReconciliationRequiredError, StaleStateError
from closedloop.execution import (
    AtomicAction,
    EffectClass,
    EffectLedger,
    EffectRecord,
    EffectStatus,
    Executor,
    OutcomeStatus,
    Reconciliation,
    RetryPolicy,
)


class World:
    """A fake outside world that records every effect applied to it."""

    def __init__(self) -> None:
        self.applied: list[tuple[str, dict[str, Any]]] = []
        self.undone: list[str] = []
        self.fail_next: list[Exception] = []

    def action(self, name: str, effect: EffectClass = EffectClass.ONCE, **kw: Any) -> AtomicAction:
        async def apply(**args: Any) -> dict[str, Any]:
            if self.fail_next:
                raise self.fail_next.pop(0)
            self.applied.append((name, args))
            return {"done": name, "n": len(self.applied)}

        def undo(args: Mapping[str, Any], result: Any) -> None:
            self.undone.append(name)

        return AtomicAction(name=name, fn=apply, effect=effect, compensation=undo, **kw)


async def test_committed_once_effect_is_replayed_not_rerun(ledger: EffectLedger) -> None:
    world = World()
    pay = world.action("pay", EffectClass.IRREVERSIBLE)
    executor = Executor(ledger)
    first = await executor.execute(pay, {"amount": 5, "request_id": "r1"}, task_id="t", step=1)
    second = await executor.execute(pay, {"amount": 5, "request_id": "r2"}, task_id="t", step=1)
    assert first.status is OutcomeStatus.SUCCEEDED and first.attempts == 1
    assert second.status is OutcomeStatus.REPLAYED and second.attempts == 0
    assert second.result == first.result == {"done": "pay", "n": 1}
    assert second.effect_key == first.effect_key
    assert len(world.applied) == 1
    record = await ledger.get(first.effect_key or "")
    assert record is not None and record.status is EffectStatus.COMMITTED and record.seq == 1
    # A fresh executor on the same store (a restarted process) replays too.
    third = await Executor(EffectLedger(ledger.store)).execute(
        pay, {"amount": 5.0}, task_id="t", step=1
    )
    assert third.status is OutcomeStatus.REPLAYED and len(world.applied) == 1


async def test_other_arguments_or_steps_are_other_effects(ledger: EffectLedger) -> None:
    world = World()
    pay = world.action("pay")
    executor = Executor(ledger)
    await executor.execute(pay, {"amount": 5}, task_id="t", step=1)
    await executor.execute(pay, {"amount": 6}, task_id="t", step=1)
    await executor.execute(pay, {"amount": 5}, task_id="t", step=2)
    await executor.execute(pay, {"amount": 5}, task_id="u", step=1)
    assert len(world.applied) == 4


async def test_pending_effect_needs_reconciliation(ledger: EffectLedger) -> None:
    world = World()
    pay = world.action("pay")
    key = ledger.key_for("t", 1, "pay", {"amount": 5})
    # What a crash between the call and the commit leaves behind.
    await ledger.claim(key=key, task_id="t", step=1, action=pay, args={"amount": 5}, attempts=1)
    outcome = await Executor(ledger).execute(pay, {"amount": 5}, task_id="t", step=1)
    assert outcome.status is OutcomeStatus.RECONCILIATION_REQUIRED
    with pytest.raises(ReconciliationRequiredError, match="pending"):
        outcome.unwrap()
    with pytest.raises(ReconciliationRequiredError, match=key):
        await ledger.reconcile_pending("t", [pay])
    assert world.applied == []


@pytest.mark.parametrize("applied", [True, False])
async def test_reconciler_resolves_a_pending_effect(ledger: EffectLedger, applied: bool) -> None:
    world = World()
    asked: list[EffectRecord] = []

    def reconciler(args: Mapping[str, Any], record: EffectRecord) -> Reconciliation:
        asked.append(record)
        return (
            Reconciliation.was_applied({"found": True}) if applied else Reconciliation.not_applied()
        )

    pay = world.action("pay", reconciler=reconciler)
    key = ledger.key_for("t", 1, "pay", {"amount": 5})
    await ledger.claim(key=key, task_id="t", step=1, action=pay, args={"amount": 5}, attempts=1)
    executor = Executor(ledger, actions=[pay])
    resolved = await executor.resume("t")
    assert [r.key for r in resolved] == [key] and asked[0].args == {"amount": 5}
    expected = EffectStatus.COMMITTED if applied else EffectStatus.FAILED
    assert resolved[0].status is expected
    outcome = await executor.execute(pay, {"amount": 5}, task_id="t", step=1)
    if applied:
        assert outcome.status is OutcomeStatus.REPLAYED and outcome.result == {"found": True}
        assert world.applied == []
    else:
        assert outcome.status is OutcomeStatus.SUCCEEDED and len(world.applied) == 1
    assert await ledger.pending("t") == []


async def test_failed_effect_may_run_again(ledger: EffectLedger) -> None:
    world = World()
    world.fail_next = [ConnectionRefusedError("down")]
    pay = world.action("pay")
    executor = Executor(ledger)
    first = await executor.execute(pay, {"amount": 5}, task_id="t", step=1)
    assert first.status is OutcomeStatus.FAILED
    record = await ledger.get(first.effect_key or "")
    assert record is not None and record.status is EffectStatus.FAILED
    assert record.error == "ConnectionRefusedError: down"
    second = await executor.execute(pay, {"amount": 5}, task_id="t", step=1)
    assert second.status is OutcomeStatus.SUCCEEDED and len(world.applied) == 1


async def test_once_effects_retry_through_the_ledger(ledger: EffectLedger, sleep: Any) -> None:
    world = World()
    world.fail_next = [OSError("1"), OSError("2")]
    pay = world.action("pay", retry=RetryPolicy.exponential(3, jitter_s=0.0))
    statuses: list[str] = []

    async def watch(event: Any) -> None:
        if event.key is not None and event.name in ("claimed", "failed"):
            record = await ledger.get(event.key)
            statuses.append(f"{event.name}:{record.status if record else None}")

    outcome = await Executor(ledger, sleep=sleep, on_event=watch).execute(
        pay, {"amount": 5}, task_id="t", step=1
    )
    assert outcome.status is OutcomeStatus.SUCCEEDED and outcome.attempts == 3
    assert len(world.applied) == 1 and sleep.calls == [0.1, 0.2]
    # Each attempt is claimed (pending) before it runs and marked failed after it fails.
    assert statuses == ["claimed:pending", "failed:failed"] * 2 + ["claimed:pending"]


async def test_timeout_of_a_once_effect_stays_pending(ledger: EffectLedger) -> None:
    import asyncio

    async def hang(**args: Any) -> None:
        await asyncio.Event().wait()

    pay = AtomicAction(
        name="pay",
        fn=hang,
        effect=EffectClass.IRREVERSIBLE,
        timeout_s=0.001,
        retry=RetryPolicy.exponential(5),
    )
    outcome = await Executor(ledger).execute(pay, {"amount": 5}, task_id="t", step=1)
    # A timed-out payment may have gone through: it is neither retried nor marked failed.
    assert outcome.status is OutcomeStatus.RECONCILIATION_REQUIRED and outcome.attempts == 1
    assert [r.status for r in await ledger.records("t")] == [EffectStatus.PENDING]


async def test_timeout_with_reconciler_resolves_at_once(ledger: EffectLedger) -> None:
    import asyncio

    async def hang(**args: Any) -> None:
        await asyncio.Event().wait()

    pay = AtomicAction(
        name="pay",
        fn=hang,
        effect=EffectClass.IRREVERSIBLE,
        timeout_s=0.001,
        reconciler=lambda args, record: Reconciliation.was_applied("seen by the bank"),
    )
    outcome = await Executor(ledger).execute(pay, {"amount": 5}, task_id="t", step=1)
    assert outcome.status is OutcomeStatus.SUCCEEDED and outcome.result == "seen by the bank"
    assert [r.status for r in await ledger.records("t")] == [EffectStatus.COMMITTED]


async def test_concurrent_claim_loses_cleanly(ledger: EffectLedger) -> None:
    world = World()
    pay = world.action("pay")
    key = ledger.key_for("t", 1, "pay", {})
    await ledger.claim(key=key, task_id="t", step=1, action=pay, args={}, attempts=1)
    with pytest.raises(StaleStateError):
        await ledger.claim(key=key, task_id="t", step=1, action=pay, args={}, attempts=1)


async def test_saga_compensates_committed_effects_in_reverse_order(ledger: EffectLedger) -> None:
    world = World()
    reserve = world.action("reserve_seat", EffectClass.OVERWRITABLE)
    charge = world.action("charge_card", EffectClass.IRREVERSIBLE)
    notify = world.action("notify", EffectClass.ONCE)
    summarise = AtomicAction(name="summarise", fn=lambda **a: "text")  # nothing to undo
    executor = Executor(ledger)
    for step, action in enumerate([reserve, summarise, charge, notify]):
        outcome = await executor.execute(action, {"order": "o1"}, task_id="trip", step=step)
        assert outcome.ok
    world.fail_next = [OSError("airline rejected the ticket")]
    ticket = world.action("issue_ticket")
    failed = await executor.execute(ticket, {"order": "o1"}, task_id="trip", step=4)
    assert failed.status is OutcomeStatus.FAILED

    # A restarted process compensates from the ledger alone, given the actions by name.
    results = await EffectLedger(ledger.store).compensate("trip", [reserve, charge, notify, ticket])
    assert world.undone == ["notify", "charge_card", "reserve_seat"]
    assert [r.status for r in results] == [EffectStatus.COMPENSATED] * 3
    again = await ledger.compensate("trip", [reserve, charge, notify, ticket])
    assert again == [] and world.undone == ["notify", "charge_card", "reserve_seat"]
    replay = await executor.execute(charge, {"order": "o1"}, task_id="trip", step=2)
    assert replay.status is OutcomeStatus.FAILED and isinstance(replay.error, LedgerError)


async def test_failed_compensation_is_recorded_and_retried(ledger: EffectLedger) -> None:
    world = World()
    attempts: list[str] = []

    def flaky_refund(args: Mapping[str, Any], result: Any) -> None:
        attempts.append("refund")
        if len(attempts) == 1:
            raise RuntimeError("refund API down")

    book = world.action("book")
    charge = AtomicAction(
        name="charge",
        fn=world.action("charge").fn,
        effect=EffectClass.IRREVERSIBLE,
        compensation=flaky_refund,
    )
    executor = Executor(ledger)
    await executor.execute(book, {}, task_id="t", step=0)
    await executor.execute(charge, {}, task_id="t", step=1)
    first = await executor.compensate("t")
    assert [(r.action, r.status) for r in first] == [
        ("charge", EffectStatus.COMPENSATION_FAILED),
        ("book", EffectStatus.COMPENSATED),
    ]
    assert first[0].error == "RuntimeError: refund API down"
    second = await executor.compensate("t")
    assert [(r.action, r.status) for r in second] == [("charge", EffectStatus.COMPENSATED)]


async def test_compensate_refuses_while_effects_are_pending(ledger: EffectLedger) -> None:
    world = World()
    pay = world.action("pay")
    key = ledger.key_for("t", 0, "pay", {})
    await ledger.claim(key=key, task_id="t", step=0, action=pay, args={}, attempts=1)
    with pytest.raises(ReconciliationRequiredError):
        await ledger.compensate("t", [pay])
    assert world.undone == []


async def test_compensate_needs_the_actions(ledger: EffectLedger) -> None:
    world = World()
    await Executor(ledger).execute(world.action("pay"), {}, task_id="t", step=0)
    with pytest.raises(LedgerError, match="pay"):
        await ledger.compensate("t", [])


async def test_postcondition_failure_of_once_effect_is_compensated_and_recorded(
    ledger: EffectLedger,
) -> None:
    world = World()
    pay = world.action("pay", postconditions=[lambda result, args: result["n"] > 99])
    outcome = await Executor(ledger).execute(pay, {"amount": 1}, task_id="t", step=0)
    assert outcome.status is OutcomeStatus.POSTCONDITION_FAILED and outcome.compensated
    assert world.undone == ["pay"]
    [record] = await ledger.records("t")
    assert record.status is EffectStatus.COMPENSATED


async def test_unstorable_result_still_commits(ledger: EffectLedger) -> None:
    class Receipt:
        pass

    pay = AtomicAction(name="pay", fn=lambda **a: Receipt(), effect=EffectClass.ONCE)
    outcome = await Executor(ledger).execute(pay, {}, task_id="t", step=0)
    assert isinstance(outcome.result, Receipt)
    [record] = await ledger.records("t")
    assert record.status is EffectStatus.COMMITTED and record.result is None
    assert record.note is not None and "result not stored" in record.note
    replay = await Executor(ledger).execute(pay, {}, task_id="t", step=0)
    assert replay.status is OutcomeStatus.REPLAYED


async def test_records_are_stored_as_plain_json(ledger: EffectLedger) -> None:
    world = World()
    outcome = await Executor(ledger).execute(
        world.action("pay"), {"amount": 2.5, "tags": ("a",)}, task_id="t", step=0
    )
    stored = await ledger.store.record_get("ledger", outcome.effect_key or "")
    assert stored is not None
    assert stored.value["status"] == "committed" and stored.value["effect"] == "once"
    assert stored.value["args"]["amount"] == 2.5
    assert list(stored.value["args"]["tags"]) == ["a"]


async def test_failing_reconciler_leaves_the_effect_pending(ledger: EffectLedger) -> None:
    def unreachable(args: Mapping[str, Any], record: EffectRecord) -> Reconciliation:
        raise ConnectionError("bank API unreachable")

    world = World()
    pay = world.action("pay", reconciler=unreachable)
    key = ledger.key_for("t", 0, "pay", {})
    await ledger.claim(key=key, task_id="t", step=0, action=pay, args={}, attempts=1)
    with pytest.raises(ReconciliationRequiredError, match="reconciler failed: ConnectionError"):
        await ledger.reconcile_pending("t", [pay])
    outcome = await Executor(ledger).execute(pay, {}, task_id="t", step=0)
    assert outcome.status is OutcomeStatus.RECONCILIATION_REQUIRED
    assert isinstance(outcome.error, ReconciliationRequiredError)
    assert isinstance(outcome.error.__cause__, ConnectionError)
    assert world.applied == [] and [r.status for r in await ledger.records("t")] == [
        EffectStatus.PENDING
    ]


async def test_uncertain_errors_are_not_taken_as_failures(ledger: EffectLedger) -> None:
    class ResponseLost(Exception):
        """The request was sent; the answer never came back."""

    world = World()
    world.fail_next = [ResponseLost("connection reset after send")]
    pay = world.action("pay", uncertain_errors=(ResponseLost,), retry=RetryPolicy.exponential(3))
    outcome = await Executor(ledger).execute(pay, {}, task_id="t", step=0)
    assert outcome.status is OutcomeStatus.RECONCILIATION_REQUIRED and outcome.attempts == 1
    assert [r.status for r in await ledger.records("t")] == [EffectStatus.PENDING]


async def test_concurrent_executions_apply_a_once_effect_once(ledger: EffectLedger) -> None:
    import asyncio

    world = World()
    pay = world.action("pay", EffectClass.IRREVERSIBLE)
    executors = [Executor(EffectLedger(ledger.store)) for _ in range(20)]
    outcomes = await asyncio.gather(
        *(ex.execute(pay, {"amount": 1}, task_id="t", step=0) for ex in executors)
    )
    assert len(world.applied) == 1
    statuses = {o.status for o in outcomes}
    assert OutcomeStatus.SUCCEEDED in statuses
    # The others either saw the commit or saw the claim in flight; none ran the effect.
    assert statuses <= {
        OutcomeStatus.SUCCEEDED,
        OutcomeStatus.REPLAYED,
        OutcomeStatus.RECONCILIATION_REQUIRED,
    }
    assert sum(o.status is OutcomeStatus.SUCCEEDED for o in outcomes) == 1
