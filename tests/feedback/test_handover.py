"""The human handover queue on both real stores: submit, list, decide once, race, persist."""

from __future__ import annotations

import asyncio
import itertools
import logging
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from closedloop import ConfigurationError, SessionNotFoundError, StaleStateError
from closedloop.feedback import (
    HANDOVER_NAMESPACE,
    EscalateToHuman,
    HandoverDecision,
    HandoverItem,
    HandoverQueue,
    HandoverRequested,
    HandoverStatus,
    MemoryStore,
    SchemaDrift,
    SQLiteStore,
)
from closedloop.feedback._contract import Record
from closedloop.feedback._store import BaseStore

from .conftest import FakeClock

AUDIT = {
    "observed": [{"step": 3, "observation": {"status": "empty", "confidence": 0.0}}],
    "failed_checks": ["price is required", "flight id did not validate"],
    "suggested_fix": "widen the date range by one day (run r-17 succeeded that way)",
}
FROZEN = {"phase": "search", "cursor": 3, "fields": {"origin": "PEK", "price": None}}


async def test_submit_then_get_round_trips_every_field(store: BaseStore, clock: FakeClock) -> None:
    queue = HandoverQueue(store, clock=clock)
    item_id = await queue.submit("task-1", "run-1", AUDIT, frozen_state=FROZEN, session_id="s-1")
    item = await queue.get(item_id)
    assert item == HandoverItem(
        id=item_id,
        task_id="task-1",
        run_id="run-1",
        session_id="s-1",
        status=HandoverStatus.PENDING,
        audit=AUDIT,
        frozen_state=FROZEN,
        created_at=clock.now,
        version=1,
    )
    assert item.state_to_resume() is None  # pending: nothing to resume yet
    with pytest.raises(Exception, match="frozen"):
        item.status = HandoverStatus.APPROVED  # type: ignore[misc]
    record = await store.record_get(HANDOVER_NAMESPACE, item_id)
    assert record is not None and record.value["format"] == 1


async def test_ids_are_random_unguessable_tokens(store: BaseStore) -> None:
    queue = HandoverQueue(store)
    ids = [await queue.submit("t", "r", {}) for _ in range(20)]
    assert len(set(ids)) == 20
    for item_id in ids:
        assert re.fullmatch(r"ho_[A-Za-z0-9_\-]{24}", item_id), item_id
    # 144 random bits: no two ids share even a long prefix by chance.
    assert len({i[:12] for i in ids}) == 20


async def test_list_is_oldest_first_and_filters_by_status(
    store: BaseStore, clock: FakeClock
) -> None:
    names = iter(["zz", "aa", "mm"])  # key order differs from creation order on purpose
    queue = HandoverQueue(store, clock=clock, new_id=lambda: next(names))
    for task in ("first", "second", "third"):
        await queue.submit(task, "run", AUDIT)
        clock.advance(5)
    assert [i.task_id for i in await queue.list()] == ["first", "second", "third"]
    await queue.decide("aa", "reject", note="duplicate")
    assert [i.task_id for i in await queue.list(HandoverStatus.PENDING)] == ["first", "third"]
    assert [i.task_id for i in await queue.list("rejected")] == ["second"]
    assert await queue.list("approved") == []
    with pytest.raises(ConfigurationError, match="status='open'"):
        await queue.list("open")


async def test_unknown_id_is_a_not_found_error(store: BaseStore) -> None:
    queue = HandoverQueue(store)
    with pytest.raises(SessionNotFoundError, match="handover 'ho_nope' not found"):
        await queue.get("ho_nope")
    with pytest.raises(SessionNotFoundError, match="ho_nope"):
        await queue.decide("ho_nope", "approve")
    with pytest.raises(ConfigurationError, match="id=''"):
        await queue.get("")


async def test_approve_resumes_from_the_frozen_state(store: BaseStore, clock: FakeClock) -> None:
    queue = HandoverQueue(store, clock=clock)
    item_id = await queue.submit("t", "r", AUDIT, frozen_state=FROZEN)
    clock.advance(30)
    item = await queue.decide(item_id, HandoverDecision.APPROVE, note="ok", decided_by="ana")
    assert item.status is HandoverStatus.APPROVED and item.status.decided
    assert (item.decided_at, item.decided_by, item.note, item.edits) == (
        clock.now,
        "ana",
        "ok",
        None,
    )
    assert item.created_at == clock.now - 30
    assert item.version == 2
    assert item.state_to_resume() == FROZEN
    assert await queue.get(item_id) == item


async def test_edit_needs_edits_and_merges_them_into_the_state(store: BaseStore) -> None:
    queue = HandoverQueue(store)
    item_id = await queue.submit("t", "r", AUDIT, frozen_state=FROZEN)
    for missing in (None, {}):
        with pytest.raises(ConfigurationError, match="edits"):
            await queue.decide(item_id, "edit", edits=missing)
    assert (await queue.get(item_id)).status is HandoverStatus.PENDING  # nothing was written

    item = await queue.decide(item_id, "edit", edits={"cursor": 2, "note": "retry"})
    assert item.status is HandoverStatus.EDITED
    assert item.edits == {"cursor": 2, "note": "retry"}
    assert item.state_to_resume() == {**FROZEN, "cursor": 2, "note": "retry"}
    assert item.frozen_state == FROZEN  # the frozen state itself is kept as it was


async def test_reject_ends_the_task_and_takes_no_edits(store: BaseStore) -> None:
    queue = HandoverQueue(store)
    item_id = await queue.submit("t", "r", AUDIT, frozen_state=FROZEN)
    with pytest.raises(ConfigurationError, match="'reject' decision takes no edits"):
        await queue.decide(item_id, "reject", edits={"x": 1})
    with pytest.raises(ConfigurationError, match="decision='maybe'"):
        await queue.decide(item_id, "maybe")
    item = await queue.decide(item_id, "reject")
    assert item.status is HandoverStatus.REJECTED
    assert item.state_to_resume() is None


async def test_deciding_twice_is_refused(store: BaseStore) -> None:
    queue = HandoverQueue(store)
    item_id = await queue.submit("t", "r", AUDIT)
    await queue.decide(item_id, "approve", decided_by="ana")
    with pytest.raises(StaleStateError, match=r"already decided \(approved by ana"):
        await queue.decide(item_id, "reject", decided_by="bo")
    item = await queue.get(item_id)
    assert (item.status, item.decided_by) == (HandoverStatus.APPROVED, "ana")


class _Barrier:
    """Holds the first ``n`` writes until all of them arrived."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.arrived = 0
        self.all_in = asyncio.Event()

    async def wait(self) -> None:
        if self.arrived < self.n:
            self.arrived += 1
            if self.arrived == self.n:
                self.all_in.set()
            await self.all_in.wait()


class _BarrierStore:
    """Delegates to a real store, but its record_puts pass a shared barrier first.

    Every reviewer has then read the item as pending before any of them writes: the
    worst interleaving, every time.
    """

    def __init__(self, store: BaseStore, barrier: _Barrier) -> None:
        self._store = store
        self._barrier = barrier

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def record_put(
        self, namespace: str, key: str, value: Mapping[str, Any], **kw: Any
    ) -> Record:
        await self._barrier.wait()
        return await self._store.record_put(namespace, key, value, **kw)


async def _race(queues: list[HandoverQueue], item_id: str) -> list[Any]:
    decisions = ["approve", "reject", "edit"]
    return await asyncio.gather(
        *(
            q.decide(
                item_id,
                decisions[i % 3],
                edits={"n": i} if decisions[i % 3] == "edit" else None,
                decided_by=f"reviewer-{i}",
            )
            for i, q in enumerate(queues)
        ),
        return_exceptions=True,
    )


async def test_racing_reviewers_exactly_one_wins_memory(clock: FakeClock) -> None:
    store = MemoryStore(clock=clock)
    item_id = await HandoverQueue(store).submit("t", "r", AUDIT)
    barrier = _BarrierStore(store, _Barrier(5))
    queues = [HandoverQueue(barrier) for _ in range(5)]  # type: ignore[arg-type]
    outcomes = await _race(queues, item_id)
    winners = [o for o in outcomes if isinstance(o, HandoverItem)]
    losers = [o for o in outcomes if isinstance(o, StaleStateError)]
    assert len(winners) == 1 and len(losers) == 4, outcomes
    assert all("already decided" in str(e) for e in losers)
    assert store.stats.cas_conflicts == 4  # the race really happened at the store
    assert await HandoverQueue(store).get(item_id) == winners[0]


async def test_racing_reviewers_on_two_sqlite_connections_exactly_one_wins(
    tmp_path: Path, clock: FakeClock
) -> None:
    """Two server processes would hold two stores on one file; so do we, on separate threads."""
    path = tmp_path / "state.db"
    a, b = SQLiteStore(path, clock=clock), SQLiteStore(path, clock=clock)
    try:
        item_id = await HandoverQueue(a).submit("t", "r", AUDIT, frozen_state=FROZEN)
        barrier = _Barrier(6)
        barrier_a, barrier_b = _BarrierStore(a, barrier), _BarrierStore(b, barrier)
        # Three reviewers on each connection, all reading before any of them writes.
        queues = [HandoverQueue(barrier_a) for _ in range(3)] + [  # type: ignore[arg-type]
            HandoverQueue(barrier_b)  # type: ignore[arg-type]
            for _ in range(3)
        ]
        outcomes = await _race(queues, item_id)
        winners = [o for o in outcomes if isinstance(o, HandoverItem)]
        assert len(winners) == 1, outcomes
        assert sum(isinstance(o, StaleStateError) for o in outcomes) == 5, outcomes
        for store in (a, b):
            assert await HandoverQueue(store).get(item_id) == winners[0]
    finally:
        await a.close()
        await b.close()


async def test_queue_survives_reopening_the_sqlite_file(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "queue.db"
    async with SQLiteStore(path, clock=clock) as store:
        item_id = await HandoverQueue(store, clock=clock).submit(
            "t", "r", AUDIT, frozen_state=FROZEN, session_id="s"
        )
    async with SQLiteStore(path, clock=clock) as reopened:
        queue = HandoverQueue(reopened, clock=clock)
        (item,) = await queue.list(HandoverStatus.PENDING)
        assert (item.id, item.frozen_state, item.audit) == (item_id, FROZEN, AUDIT)
        await queue.decide(item_id, "approve")
    async with SQLiteStore(path, clock=clock) as again:
        assert (await HandoverQueue(again).get(item_id)).status is HandoverStatus.APPROVED


async def test_audit_is_redacted_and_frozen_state_keeps_no_secret(store: BaseStore) -> None:
    queue = HandoverQueue(store)
    secret = "sk-proj-abcdefghij0123456789ABCDEFGHIJ"
    item_id = await queue.submit(
        "t",
        "r",
        {"observed": [{"headers": {"Authorization": f"Bearer {secret}"}}], "note": secret},
        frozen_state={"cursor": 1, "draft": f"call with {secret}"},
    )
    item = await queue.get(item_id)
    assert item.audit == {
        "observed": [{"headers": {"Authorization": "[redacted]"}}],
        "note": "[redacted]",
    }
    # The frozen state keeps every key (the task resumes from it) but no secret in clear:
    # the store's own boundary scrubs its text, as it does every write.
    assert item.frozen_state == {"cursor": 1, "draft": "call with [redacted]"}


async def test_an_id_collision_never_overwrites_an_item(store: BaseStore) -> None:
    queue = HandoverQueue(store, new_id=lambda: "fixed")
    await queue.submit("first", "r", AUDIT)
    with pytest.raises(StaleStateError):
        await queue.submit("second", "r", AUDIT)
    assert (await queue.get("fixed")).task_id == "first"


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"task_id": "", "run_id": "r", "audit": {}}, "task_id"),
        ({"task_id": "t", "run_id": None, "audit": {}}, "run_id"),
        ({"task_id": "t", "run_id": "r", "audit": ["a"]}, "audit"),
        ({"task_id": "t", "run_id": "r", "audit": {}, "frozen_state": "x"}, "frozen_state"),
        ({"task_id": "t", "run_id": "r", "audit": {}, "session_id": ""}, "session_id"),
    ],
)
async def test_submit_checks_its_arguments(
    store: BaseStore, kwargs: dict[str, Any], argument: str
) -> None:
    with pytest.raises(ConfigurationError, match=f"^{argument}="):
        await HandoverQueue(store).submit(**kwargs)
    assert await store.record_list(HANDOVER_NAMESPACE) == []


async def test_escalations_are_pending_items_a_reviewer_can_decide(
    store: BaseStore, clock: FakeClock
) -> None:
    ids = itertools.count(1)
    escalate = EscalateToHuman(store, clock=clock, new_id=lambda: f"e{next(ids)}")
    await escalate(
        HandoverRequested(
            source="payments", session_id="s-9", detail="401 with Bearer abc.def-ghi_0123456"
        )
    )
    clock.advance(1)
    queue = HandoverQueue(store, clock=clock)
    await queue.submit("t", "r", AUDIT)
    escalated, submitted = await queue.list()
    assert escalated.id == "s-9/e1" and escalated.session_id == "s-9"
    assert escalated.status is HandoverStatus.PENDING
    assert escalated.audit["failed_checks"] == [
        "HandoverRequested from payments: 401 with [redacted]"
    ]
    assert escalated.audit["observed"][0]["event"]["detail"] == "401 with [redacted]"
    assert submitted.task_id == "t"

    decided = await queue.decide("s-9/e1", "reject", decided_by="ops")
    assert decided.status is HandoverStatus.REJECTED
    record = await store.record_get(HANDOVER_NAMESPACE, "s-9/e1")
    assert record is not None and record.value["format"] == 1  # now in the queue's format
    assert (await queue.get("s-9/e1")).audit == escalated.audit


async def test_a_foreign_record_is_skipped_in_lists_and_refused_by_get(
    store: BaseStore, caplog: pytest.LogCaptureFixture
) -> None:
    queue = HandoverQueue(store)
    item_id = await queue.submit("t", "r", AUDIT)
    await store.record_put(HANDOVER_NAMESPACE, "junk", {"hello": "world"})
    await store.record_put(HANDOVER_NAMESPACE, "bad", {"format": 1, "task_id": 5})
    with caplog.at_level(logging.WARNING, logger="closedloop.handover"):
        assert [i.id for i in await queue.list()] == [item_id]
    assert "handover/junk" in caplog.text and "handover/bad" in caplog.text
    with pytest.raises(ConfigurationError, match="not a handover item"):
        await queue.get("junk")
    with pytest.raises(ConfigurationError, match="not a valid handover item"):
        await queue.get("bad")


async def test_a_custom_namespace_keeps_queues_apart(store: BaseStore) -> None:
    ops, billing = HandoverQueue(store), HandoverQueue(store, namespace="billing-handover")
    await ops.submit("t1", "r", AUDIT)
    await billing.submit("t2", "r", AUDIT)
    assert [i.task_id for i in await ops.list()] == ["t1"]
    assert [i.task_id for i in await billing.list()] == ["t2"]
    with pytest.raises(ConfigurationError, match="namespace"):
        HandoverQueue(store, namespace="")


def test_decision_maps_to_status() -> None:
    assert {d.value: d.status.value for d in HandoverDecision} == {
        "approve": "approved",
        "edit": "edited",
        "reject": "rejected",
    }
    assert not HandoverStatus.PENDING.decided


async def test_schema_drift_escalation_stays_readable(clock: FakeClock) -> None:
    store = MemoryStore(clock=clock)
    escalate = EscalateToHuman(store, clock=clock, new_id=lambda: "x")
    await escalate(SchemaDrift(source="flights", session_id=None, missing_fields=("price",)))
    (item,) = await HandoverQueue(store).list()
    assert item.id == "-/x" and item.session_id is None and item.task_id == ""
    assert item.audit["event_type"] == "SchemaDrift"
    assert item.audit["observed"][0]["event"]["missing_fields"] == ["price"]
