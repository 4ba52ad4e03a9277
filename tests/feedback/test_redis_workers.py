"""What several workers share through Redis: the effect ledger, the handover queue and the
PID controllers' warm-start history. Each "worker" is its own RedisStore on one URL."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from closedloop import EffectInFlightError, StaleStateError
from closedloop.agent import ControlConfig
from closedloop.agent._control import ControllerBank
from closedloop.execution import (
    AtomicAction,
    EffectClass,
    EffectLedger,
    EffectStatus,
    Executor,
    OutcomeStatus,
)
from closedloop.feedback import HandoverItem, HandoverQueue, HandoverStatus, RedisStore


class World:
    """The outside world: counts every payment that reached it."""

    def __init__(self) -> None:
        self.payments: list[dict[str, Any]] = []

    def pay(self) -> AtomicAction:
        async def apply(**args: Any) -> dict[str, Any]:
            await asyncio.sleep(0)  # let the other workers run between claim and commit
            self.payments.append(args)
            return {"receipt": len(self.payments)}

        return AtomicAction(name="pay", fn=apply, effect=EffectClass.IRREVERSIBLE)


@pytest.fixture
async def two_workers(redis_url: str) -> AsyncIterator[tuple[RedisStore, RedisStore]]:
    a, b = RedisStore(redis_url), RedisStore(redis_url)
    yield a, b
    await a.close()
    await b.close()


# --- the effect ledger ------------------------------------------------------------------------


async def test_an_irreversible_effect_runs_once_across_workers(
    two_workers: tuple[RedisStore, RedisStore], redis_url: str
) -> None:
    world = World()
    pay = world.pay()
    executors = [Executor(EffectLedger(two_workers[i % 2])) for i in range(12)]
    outcomes = await asyncio.gather(
        *(ex.execute(pay, {"amount": 7}, task_id="t1", step=3) for ex in executors)
    )
    assert len(world.payments) == 1
    assert sum(o.status is OutcomeStatus.SUCCEEDED for o in outcomes) == 1
    assert {o.status for o in outcomes} <= {
        OutcomeStatus.SUCCEEDED,
        OutcomeStatus.REPLAYED,
        OutcomeStatus.RECONCILIATION_REQUIRED,
    }
    # A third worker started later replays the recorded result instead of paying again.
    async with RedisStore(redis_url) as late:
        replay = await Executor(EffectLedger(late)).execute(
            pay, {"amount": 7}, task_id="t1", step=3
        )
        (record,) = await EffectLedger(late).records("t1")
    assert replay.status is OutcomeStatus.REPLAYED and replay.result == {"receipt": 1}
    assert (record.status, record.seq) == (EffectStatus.COMMITTED, 1)
    assert len(world.payments) == 1


async def test_a_claim_left_by_a_crashed_worker_is_never_run_blind(
    two_workers: tuple[RedisStore, RedisStore],
) -> None:
    a, b = two_workers
    world = World()
    pay = world.pay()
    crashed = EffectLedger(a)
    key = crashed.key_for("t2", 1, "pay", {"amount": 3})
    # Worker a claimed the payment and died before it could commit (or even call the bank).
    await crashed.claim(key=key, task_id="t2", step=1, action=pay, args={"amount": 3}, attempts=1)
    await a.close()

    # Within a's lease the claim may be a call in flight: b does not wait, and never pays.
    outcome = await Executor(EffectLedger(b), in_flight_wait_s=0.0).execute(
        pay, {"amount": 3}, task_id="t2", step=1
    )
    assert outcome.status is OutcomeStatus.RECONCILIATION_REQUIRED
    assert isinstance(outcome.error, EffectInFlightError)
    assert world.payments == []
    assert [r.key for r in await EffectLedger(b).pending("t2")] == [key]


async def test_commit_sequence_numbers_stay_unique_across_workers(
    two_workers: tuple[RedisStore, RedisStore],
) -> None:
    world = World()
    pay = world.pay()
    ledgers = [EffectLedger(two_workers[i % 2]) for i in range(8)]
    await asyncio.gather(
        *(
            Executor(ledger).execute(pay, {"amount": i}, task_id="t3", step=i)
            for i, ledger in enumerate(ledgers)
        )
    )
    records = await EffectLedger(two_workers[0]).records("t3")
    assert sorted(r.seq or 0 for r in records) == list(range(1, 9))
    assert len(world.payments) == 8


async def test_committed_effects_survive_a_redis_crash(redis_server: Any, redis_url: str) -> None:
    world = World()
    pay = world.pay()
    async with RedisStore(redis_url) as store:
        first = await Executor(EffectLedger(store)).execute(pay, {"n": 1}, task_id="t4", step=0)
        assert first.status is OutcomeStatus.SUCCEEDED
        redis_server.kill()
        redis_server.start()
        again = await Executor(EffectLedger(store)).execute(pay, {"n": 1}, task_id="t4", step=0)
    assert again.status is OutcomeStatus.REPLAYED and again.result == first.result
    assert len(world.payments) == 1


# --- the handover queue -------------------------------------------------------------------------


async def test_handover_items_are_shared_and_decided_once(
    two_workers: tuple[RedisStore, RedisStore],
) -> None:
    a, b = two_workers
    frozen = {"phase": "book", "cursor": 2, "fields": {"price": None}}
    item_id = await HandoverQueue(a).submit(
        "t", "run-1", {"why": "price missing"}, frozen_state=frozen
    )
    (pending,) = await HandoverQueue(b).list(HandoverStatus.PENDING)
    assert (pending.id, pending.frozen_state) == (item_id, frozen)

    decisions = ["approve", "reject", "approve", "reject", "approve", "reject"]
    outcomes = await asyncio.gather(
        *(
            HandoverQueue(two_workers[i % 2]).decide(item_id, d, decided_by=f"reviewer-{i}")
            for i, d in enumerate(decisions)
        ),
        return_exceptions=True,
    )
    winners = [o for o in outcomes if isinstance(o, HandoverItem)]
    assert len(winners) == 1, outcomes
    assert sum(isinstance(o, StaleStateError) for o in outcomes) == 5, outcomes
    for store in (a, b):
        assert await HandoverQueue(store).get(item_id) == winners[0]
    assert await HandoverQueue(a).list(HandoverStatus.PENDING) == []


# --- controller state -------------------------------------------------------------------------


async def test_a_pid_continues_on_another_worker_with_the_same_output(
    two_workers: tuple[RedisStore, RedisStore], redis_url: str
) -> None:
    a, b = two_workers
    config = ControlConfig()
    errors = [0.9, 0.7, 0.8, 0.4, 0.6]
    first = ControllerBank(config, a)
    cold = await first.output("search")
    for e in errors:
        await first.update("search", e)
    expected = await first.output("search")
    assert expected != cold  # the history changed the controller

    second = ControllerBank(config, b)  # another worker picks the task up
    assert await second.output("search") == expected
    assert second.warm["search"] == len(errors)
    assert await ControllerBank(config, b).output("other-step") == cold

    # Both now continue identically: the store carries the state, not the process.
    u_first, _ = await first.update("search", 0.3)
    u_second, _ = await second.update("search", 0.3)
    assert u_first == u_second
    async with RedisStore(redis_url) as third_store:
        third = ControllerBank(config, third_store)
        assert third.warm == {} and await third.output("search") == u_second
        assert third.warm["search"] == len(errors) + 1
