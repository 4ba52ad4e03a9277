"""Claims with an owner, a lease and a fencing token.

A live claim of another owner is an effect in flight: never reconciled, waited for. Only an
expired lease (or the owner itself, restarted) is reconciled, and a takeover fences the
previous owner out of both the call and the commit. Time is a hand-driven clock: the
executor's sleep moves it, nothing sleeps for real.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from closedloop import (
    ConfigurationError,
    EffectInFlightError,
    FencedOutError,
    ReconciliationRequiredError,
)
from closedloop.execution import (
    AtomicAction,
    EffectClass,
    EffectLedger,
    EffectRecord,
    EffectStatus,
    ExecutionEvent,
    Executor,
    OutcomeStatus,
    Reconciliation,
)
from closedloop.feedback import MemoryStore, RedisStore, SQLiteStore, StateStore
from closedloop.policy import RetryPolicy, stop_after_attempt

LEASE_S = 60.0
ARGS = {"customer": "c-1", "sku": "A"}


@dataclass
class Time:
    """Wall and monotonic time that move only when slept through."""

    now: float = 1_000.0
    slept: list[float] = field(default_factory=list)
    on_sleep: Callable[[], Awaitable[None]] | None = None

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds
        if self.on_sleep is not None:
            await self.on_sleep()


@dataclass
class Shop:
    """The world: every order placed, and how often the reconciler asked about one."""

    orders: list[dict[str, Any]] = field(default_factory=list)
    asked: int = 0
    during_call: Callable[[], Awaitable[None]] | None = None

    def order(self) -> AtomicAction:
        async def place(**args: Any) -> dict[str, Any]:
            if self.during_call is not None:
                await self.during_call()
            self.orders.append(args)
            return {"order_id": f"o{len(self.orders)}"}

        async def reconcile(args: Any, record: EffectRecord) -> Reconciliation:
            self.asked += 1
            found = [o for o in self.orders if o == dict(args)]
            if found:
                return Reconciliation.was_applied({"order_id": "found"})
            return Reconciliation.not_applied()

        return AtomicAction(
            name="order", fn=place, effect=EffectClass.IRREVERSIBLE, reconciler=reconcile
        )


def ledger(store: StateStore, owner: str, time: Time) -> EffectLedger:
    return EffectLedger(store, owner=owner, lease_s=LEASE_S, clock=time)


def executor(book: EffectLedger, time: Time, wait_s: float = 30.0, **kw: Any) -> Executor:
    return Executor(book, sleep=time.sleep, clock=time, in_flight_wait_s=wait_s, **kw)


async def claim(book: EffectLedger, action: AtomicAction, task: str = "t") -> EffectRecord:
    key = book.key_for(task, 1, action.name, ARGS)
    return await book.claim(key=key, task_id=task, step=1, action=action, args=ARGS, attempts=1)


@pytest.fixture(params=["memory", "sqlite", "redis"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[StateStore]:
    """Every backend: the token compare-and-set lives in each of them."""
    made: StateStore
    if request.param == "memory":
        made = MemoryStore()
    elif request.param == "sqlite":
        made = SQLiteStore(tmp_path / "state.db")
    else:
        made = RedisStore(request.getfixturevalue("redis_url"))
    yield made
    await made.close()


# --- a claim carries its owner, lease and token -------------------------------------------------


async def test_a_claim_records_owner_lease_and_the_first_token() -> None:
    time, shop = Time(), Shop()
    record = await claim(ledger(MemoryStore(), "run-a", time), shop.order())
    assert (record.owner, record.fence, record.lease_expires_at) == ("run-a", 1, 1_060.0)


async def test_each_new_claim_of_a_key_takes_the_next_token() -> None:
    time, shop = Time(), Shop()
    store = MemoryStore()
    book = ledger(store, "run-a", time)
    first = await claim(book, shop.order())
    failed = await book.fail(first, "refused")
    again = await book.claim(
        key=first.key, task_id="t", step=1, action=shop.order(), args=ARGS, attempts=2,
        previous=failed,
    )  # fmt: skip
    time.now += LEASE_S + 1
    taken = await ledger(store, "run-b", time).take_over(again)
    assert [first.fence, again.fence, taken.fence] == [1, 2, 3]
    assert taken.owner == "run-b"


# --- a live claim of another owner is in flight, not abandoned ---------------------------------


async def test_a_live_claim_of_another_owner_is_never_reconciled_or_run() -> None:
    time, shop = Time(), Shop()
    store = MemoryStore()
    action = shop.order()
    await claim(ledger(store, "run-a", time), action)  # run a's call is in flight

    outcome = await executor(ledger(store, "run-b", time), time, wait_s=0.0).execute(
        action, ARGS, task_id="t", step=1
    )
    assert outcome.status is OutcomeStatus.RECONCILIATION_REQUIRED
    assert isinstance(outcome.error, EffectInFlightError)
    assert "'run-a'" in str(outcome.error)
    assert (shop.orders, shop.asked) == ([], 0)


async def test_the_second_claimant_waits_and_replays_the_first_ones_commit() -> None:
    time, shop = Time(), Shop()
    store = MemoryStore()
    action = shop.order()
    book_a = ledger(store, "run-a", time)
    held = await claim(book_a, action)

    async def a_finishes() -> None:
        if len(time.slept) == 3:  # run a's call lands while b is watching
            shop.orders.append(dict(ARGS))
            await book_a.commit(held, {"order_id": "o1"})

    time.on_sleep = a_finishes
    events: list[str] = []
    outcome = await executor(
        ledger(store, "run-b", time), time, on_event=lambda e: events.append(e.name)
    ).execute(action, ARGS, task_id="t", step=1)
    assert outcome.status is OutcomeStatus.REPLAYED
    assert outcome.result == {"order_id": "o1"}
    assert (len(shop.orders), shop.asked) == (1, 0)
    assert events == ["started", "waiting", "replayed"]
    assert len(time.slept) == 3 and time.slept == sorted(time.slept)  # backing off


async def test_a_claim_outlasting_the_wait_ends_in_flight_elsewhere() -> None:
    time, shop = Time(), Shop()
    store = MemoryStore()
    action = shop.order()
    await claim(ledger(store, "run-a", time), action)
    outcome = await executor(ledger(store, "run-b", time), time, wait_s=5.0).execute(
        action, ARGS, task_id="t", step=1
    )
    assert isinstance(outcome.error, EffectInFlightError)
    assert 5.0 <= sum(time.slept) < LEASE_S  # waited its wait, not the whole lease
    assert (shop.orders, shop.asked) == ([], 0)


async def test_reconcile_pending_leaves_a_live_claim_of_another_owner_alone() -> None:
    time, shop = Time(), Shop()
    store = MemoryStore()
    action = shop.order()
    held = await claim(ledger(store, "run-a", time), action)
    with pytest.raises(ReconciliationRequiredError, match="in flight elsewhere"):
        await ledger(store, "run-b", time).reconcile_pending("t", [action])
    with pytest.raises(EffectInFlightError):
        await ledger(store, "run-b", time).reconcile(held, action)
    assert shop.asked == 0
    assert (await ledger(store, "run-b", time).get(held.key)) == held


# --- only an expired lease (or the owner itself) is reconciled ----------------------------------


async def test_an_expired_lease_is_taken_over_reconciled_and_run_once() -> None:
    time, shop = Time(), Shop()
    store = MemoryStore()
    action = shop.order()
    await claim(ledger(store, "run-a", time), action)  # run a died before its call
    time.now += LEASE_S + 1

    book_b = ledger(store, "run-b", time)
    outcome = await executor(book_b, time).execute(action, ARGS, task_id="t", step=1)
    assert outcome.status is OutcomeStatus.SUCCEEDED
    assert (len(shop.orders), shop.asked) == (1, 1)
    (record,) = await book_b.records("t")
    # token 1: a's claim; 2: b's takeover, then "not applied"; 3: b's own claim, committed
    assert (record.status, record.owner, record.fence) == (EffectStatus.COMMITTED, "run-b", 3)


async def test_a_lease_that_expires_while_watched_is_then_reconciled() -> None:
    time, shop = Time(), Shop()
    store = MemoryStore()
    action = shop.order()
    await claim(ledger(store, "run-a", time), action)
    shop.orders.append(dict(ARGS))  # a's call landed, then a died before its commit
    outcome = await executor(ledger(store, "run-b", time), time, wait_s=2 * LEASE_S).execute(
        action, ARGS, task_id="t", step=1
    )
    assert LEASE_S <= sum(time.slept) < 2 * LEASE_S
    assert outcome.status is OutcomeStatus.REPLAYED and outcome.result == {"order_id": "found"}
    assert (len(shop.orders), shop.asked) == (1, 1)


async def test_the_owner_restarted_resolves_its_own_claim_at_once() -> None:
    time, shop = Time(), Shop()
    store = MemoryStore()
    action = shop.order()
    await claim(ledger(store, "worker-1", time), action)
    shop.orders.append(dict(ARGS))
    restarted = ledger(store, "worker-1", time)  # same owner, a new process; lease still live
    (resolved,) = await restarted.reconcile_pending("t", [action])
    assert (resolved.status, resolved.fence, shop.asked) == (EffectStatus.COMMITTED, 2, 1)
    assert time.slept == []


# --- a fenced-out owner can neither apply nor commit --------------------------------------------


async def test_a_stale_owner_cannot_commit_or_fail_after_a_takeover(store: StateStore) -> None:
    time, shop = Time(), Shop()
    action = shop.order()
    book_a, book_b = ledger(store, "run-a", time), ledger(store, "run-b", time)
    held = await claim(book_a, action)
    time.now += LEASE_S + 1
    taken = await book_b.take_over(held)

    with pytest.raises(FencedOutError) as refused:
        await book_a.commit(held, {"order_id": "late"})
    assert (refused.value.expected, refused.value.actual) == (1, 2)
    with pytest.raises(FencedOutError):
        await book_a.fail(held, "late")
    with pytest.raises(FencedOutError):
        await book_a.check_fence(held)
    current = await book_b.get(held.key)
    assert current is not None and (current.status, current.owner) == (
        EffectStatus.PENDING,
        "run-b",
    )
    committed = await book_b.commit(taken, {"order_id": "o1"})
    assert committed.status is EffectStatus.COMMITTED and committed.fence == 2


async def test_a_stale_owner_is_refused_before_it_calls_the_tool() -> None:
    time, shop = Time(), Shop()
    store = MemoryStore()
    action = shop.order()
    book_b = ledger(store, "run-b", time)

    async def paused_past_the_lease(event: ExecutionEvent) -> None:
        if event.name == "claimed":  # run a stalls between its claim and its call
            time.now += LEASE_S + 1
            held = await book_b.get(event.key or "")
            assert held is not None
            await book_b.take_over(held)

    outcome = await executor(
        ledger(store, "run-a", time), time, wait_s=0.0, on_event=paused_past_the_lease
    ).execute(action, ARGS, task_id="t", step=1)
    assert shop.orders == []  # never called
    assert isinstance(outcome.error, EffectInFlightError)
    assert isinstance(outcome.error.__cause__, FencedOutError)


async def test_the_fenced_out_owner_follows_the_new_holder_to_its_end() -> None:
    """Run b took the claim over and then died too: once b's lease is over, a reconciles
    (nothing happened) and its next try applies the effect, once."""
    time, shop = Time(), Shop()
    store = MemoryStore()
    action = shop.order()
    book_b = ledger(store, "run-b", time)

    async def taken_over_once(event: ExecutionEvent) -> None:
        if event.name == "claimed" and event.attempt == 1:
            time.now += LEASE_S + 1
            held = await book_b.get(event.key or "")
            assert held is not None
            await book_b.take_over(held)

    outcome = await executor(
        ledger(store, "run-a", time), time, wait_s=2 * LEASE_S, on_event=taken_over_once
    ).execute(action, ARGS, task_id="t", step=1, retry=RetryPolicy(stop=stop_after_attempt(2)))
    assert outcome.status is OutcomeStatus.SUCCEEDED, outcome.error
    assert (len(shop.orders), shop.asked) == (1, 1)
    assert LEASE_S <= sum(time.slept) < 2 * LEASE_S
    (record,) = await book_b.records("t")
    # 1: a's claim; 2: b's takeover; 3: a's takeover of b's, "not applied"; 4: a's new claim
    assert (record.status, record.owner, record.fence) == (EffectStatus.COMMITTED, "run-a", 4)


async def test_a_call_that_outlives_its_lease_cannot_commit_over_the_takeover() -> None:
    time, shop = Time(), Shop()
    store = MemoryStore()
    action = shop.order()
    book_b = ledger(store, "run-b", time)

    async def taken_over_meanwhile() -> None:
        time.now += LEASE_S + 1
        (held,) = await book_b.pending("t")
        await book_b.take_over(held)

    shop.during_call = taken_over_meanwhile
    outcome = await executor(ledger(store, "run-a", time), time).execute(
        action, ARGS, task_id="t", step=1
    )
    assert outcome.status is OutcomeStatus.RECONCILIATION_REQUIRED
    assert isinstance(outcome.error, ReconciliationRequiredError)
    assert isinstance(outcome.error.__cause__, FencedOutError)
    assert outcome.result == {"order_id": "o1"}  # it did reach the world
    (record,) = await book_b.records("t")
    assert (record.status, record.owner, record.fence) == (EffectStatus.PENDING, "run-b", 2)


async def test_a_lease_that_ran_out_before_the_call_is_renewed_if_nobody_took_it() -> None:
    time, shop = Time(), Shop()
    store = MemoryStore()
    book = ledger(store, "run-a", time)
    held = await claim(book, shop.order())
    time.now += LEASE_S + 1
    renewed = await book.check_fence(held)
    assert renewed.fence == held.fence and renewed.lease_expires_at == time.now + LEASE_S


# --- the store's compare-and-set on the token ---------------------------------------------------


async def test_record_put_fenced_compares_the_stored_token(store: StateStore) -> None:
    put = store.record_put_fenced  # type: ignore[attr-defined]
    first = await put("ns", "k", {"fence": 1, "v": "a"}, token=0)  # absent counts as 0
    second = await put("ns", "k", {"fence": 1, "v": "b"}, token=1)
    assert (first.version, second.version) == (1, 2)
    with pytest.raises(FencedOutError) as stale:
        await put("ns", "k", {"fence": 1, "v": "c"}, token=0)
    assert (stale.value.expected, stale.value.actual) == (0, 1)
    third = await put("ns", "k", {"fence": 2, "v": "d"}, token=1)
    with pytest.raises(FencedOutError):
        await put("ns", "k", {"fence": 2, "v": "e"}, token=1)  # token 1 was replaced by 2
    record = await store.record_get("ns", "k")
    assert record is not None and record.version == third.version == 3
    assert dict(record.value) == {"fence": 2, "v": "d"}


async def test_record_put_fenced_refuses_a_token_that_goes_back(store: StateStore) -> None:
    put = store.record_put_fenced  # type: ignore[attr-defined]
    await put("ns", "k", {"fence": 3}, token=0)
    with pytest.raises(ConfigurationError, match="at least 3"):
        await put("ns", "k", {"fence": 2}, token=3)
    with pytest.raises(ConfigurationError, match="token"):
        await put("ns", "k", {"fence": 3}, token=-1)


async def test_an_untouched_claim_passes_the_fence_as_it_is_and_a_rewritten_one_is_compared() -> (
    None
):
    time, shop = Time(), Shop()
    store = MemoryStore()
    book = ledger(store, "run-a", time)
    held = await claim(book, shop.order())
    assert await book.check_fence(held) == held  # nothing written since the claim
    assert (await store.record_get(book.namespace, held.key)).version == held.version  # type: ignore[union-attr]
    time.now += LEASE_S + 1
    renewed = await book.check_fence(held)  # a write: the version moves
    assert renewed.version > held.version
    # The old copy no longer matches the stored version: read and compared field by field,
    # still this owner's claim under the same token.
    time.now += 1
    again = await book.check_fence(held)
    assert (again.fence, again.owner, again.version) == (held.fence, "run-a", renewed.version)
