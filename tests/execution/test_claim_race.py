"""N runs execute one irreversible effect at the same moment: it reaches the world once.

Each run has its own ledger (its own owner) over one of several store connections to a
real SQLite file or a real redis-server, as runs on several workers would. The tool places
an order and the reconciler asks the order book, which cannot see an order still in
flight: a claimant that took another run's live claim for an abandoned one would find
nothing, run the tool again, and the book would hold two orders.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from closedloop.execution import (
    AtomicAction,
    EffectClass,
    EffectLedger,
    EffectRecord,
    EffectStatus,
    Executor,
    OutcomeStatus,
    Reconciliation,
)
from closedloop.feedback import RedisStore, SQLiteStore, StateStore

ROUNDS = 20
CONNECTIONS = 4  # store connections the runs share, as runs share a worker's store


@dataclass
class OrderBook:
    """The world: every order placed, by the task that placed it."""

    orders: dict[str, list[str]] = field(default_factory=dict)

    def action(self) -> AtomicAction:
        async def place_order(task: str, customer: str) -> dict[str, Any]:
            for _ in range(3):  # the call is in flight: other runs get to look meanwhile
                await asyncio.sleep(0)
            placed = self.orders.setdefault(task, [])
            placed.append(customer)
            return {"order_id": f"{task}-{len(placed)}"}

        async def reconcile(args: Mapping[str, Any], record: EffectRecord) -> Reconciliation:
            placed = self.orders.get(str(args["task"]), [])
            if placed:
                return Reconciliation.was_applied({"order_id": f"{args['task']}-1"})
            return Reconciliation.not_applied()

        return AtomicAction(
            name="place_order",
            fn=place_order,
            effect=EffectClass.IRREVERSIBLE,
            reconciler=reconcile,
        )


@pytest.fixture(params=["sqlite", "redis"])
async def connections(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[list[StateStore]]:
    stores: list[StateStore] = []
    for _ in range(CONNECTIONS):
        if request.param == "sqlite":
            stores.append(SQLiteStore(tmp_path / "state.db"))
        else:
            stores.append(RedisStore(request.getfixturevalue("redis_url")))
    yield stores
    for store in stores:
        await store.close()


@pytest.mark.parametrize("runs", [2, 8, 32])
async def test_simultaneous_runs_apply_one_effect_every_round(
    connections: list[StateStore], runs: int
) -> None:
    book = OrderBook()
    action = book.action()
    for round_ in range(ROUNDS):
        task = f"order-{runs}-{round_}"
        executors = [
            Executor(EffectLedger(connections[i % CONNECTIONS], owner=f"run-{i}"))
            for i in range(runs)
        ]
        outcomes = await asyncio.gather(
            *(
                ex.execute(action, {"task": task, "customer": "c-1"}, task_id=task, step=1)
                for ex in executors
            )
        )
        assert book.orders[task] == ["c-1"], f"round {round_}: {book.orders[task]}"
        statuses = sorted(o.status.value for o in outcomes)
        assert statuses == ["replayed"] * (runs - 1) + ["succeeded"], (round_, statuses)
        assert {o.result["order_id"] for o in outcomes} == {f"{task}-1"}
        (record,) = await EffectLedger(connections[0]).records(task)
        assert (record.status, record.fence) == (EffectStatus.COMMITTED, 1)
    assert sum(len(placed) for placed in book.orders.values()) == ROUNDS


async def test_a_crash_mid_race_leaves_the_effect_to_the_lease_not_to_a_guess(
    connections: list[StateStore],
) -> None:
    """The winner never commits (its worker died): the others report it in flight."""
    book = OrderBook()
    action = book.action()
    dead = EffectLedger(connections[0], owner="dead-run")
    task = "order-crash"
    args = {"task": task, "customer": "c-1"}
    key = dead.key_for(task, 1, action.name, args)
    await dead.claim(key=key, task_id=task, step=1, action=action, args=args, attempts=1)
    outcomes = await asyncio.gather(
        *(
            Executor(
                EffectLedger(connections[i % CONNECTIONS], owner=f"run-{i}"), in_flight_wait_s=0.0
            ).execute(action, args, task_id=task, step=1)
            for i in range(8)
        )
    )
    assert {o.status for o in outcomes} == {OutcomeStatus.RECONCILIATION_REQUIRED}
    assert task not in book.orders


async def test_runs_racing_to_take_over_an_expired_claim_apply_it_once(
    connections: list[StateStore],
) -> None:
    """A dead run's claim, long past its lease: one racer takes it over, the rest follow it."""
    book = OrderBook()
    action = book.action()
    for round_ in range(5):
        task = f"order-expired-{round_}"
        args = {"task": task, "customer": "c-1"}
        dead = EffectLedger(connections[0], owner="dead-run", lease_s=1.0)
        key = dead.key_for(task, 1, action.name, args)
        await dead.claim(key=key, task_id=task, step=1, action=action, args=args, attempts=1)

        def later() -> float:
            return time.time() + 3600.0  # the racers' clock: the dead run's lease is long over

        outcomes = await asyncio.gather(
            *(
                Executor(
                    EffectLedger(connections[i % CONNECTIONS], owner=f"run-{i}", clock=later)
                ).execute(action, args, task_id=task, step=1)
                for i in range(8)
            )
        )
        assert book.orders[task] == ["c-1"], f"round {round_}: {book.orders[task]}"
        assert all(o.ok for o in outcomes), [str(o.error) for o in outcomes if not o.ok]
        assert {o.result["order_id"] for o in outcomes} == {f"{task}-1"}
        (record,) = await EffectLedger(connections[0]).records(task)
        assert record.status is EffectStatus.COMMITTED and record.owner != "dead-run"
