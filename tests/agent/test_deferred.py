"""The PID history and the success memory ride along with each step's state save."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from closedloop import StaleStateError
from closedloop.agent import Runtime
from closedloop.agent._deferred import DeferredRecords, RidingWrites
from closedloop.agent._state import StateHandle, TaskState
from closedloop.execution import AtomicAction, EffectClass, EffectLedger, EffectStatus
from closedloop.feedback import MemoryStore, SQLiteStore

from .conftest import call, final, make_agent, scripted


class CountingStore(SQLiteStore):
    """A real SQLite store that counts its write calls by kind and namespace."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.writes: list[tuple[str, str]] = []

    async def put(self, *args: Any, **kwargs: Any) -> Any:
        self.writes.append(("put", ""))
        return await super().put(*args, **kwargs)

    async def put_with_records(self, *args: Any, **kwargs: Any) -> Any:
        names = ",".join(sorted({r[0] for r in kwargs.get("records", ())}))
        self.writes.append(("put_with_records", names))
        return await super().put_with_records(*args, **kwargs)

    async def record_put(self, namespace: str, *args: Any, **kwargs: Any) -> Any:
        self.writes.append(("record_put", namespace))
        return await super().record_put(namespace, *args, **kwargs)


def lookup(city: str) -> dict[str, Any]:
    """Look a city up."""
    return {"city": city, "temp_c": 20 + len(city)}


async def test_a_step_costs_one_state_commit_with_its_hints(tmp_path: Path) -> None:
    store = CountingStore(tmp_path / "state.db")
    try:
        model = scripted(call("lookup", city="Paris"), call("lookup", city="Rome"), final("ok"))
        agent, _ = make_agent(model, [lookup], runtime=Runtime(store=store))
        result = await agent.run("weather")
        assert result.success
        hints = [
            w for w in store.writes if w[0] == "record_put" and w[1] in {"control", "successes"}
        ]
        assert hints == []  # no commit of their own
        together = [w for w in store.writes if w[0] == "put_with_records"]
        assert len(together) == len(result.steps)
        assert all("control" in w[1] for w in together)
        pid = await store.record_get("control", "lookup")
        assert pid is not None and len(pid.value["errors"]) == 2
        remembered = await store.record_list("successes", "lookup/")
        assert {r.value["arguments"]["city"] for r in remembered} == {"Paris", "Rome"}
    finally:
        await store.close()


async def test_waiting_writes_are_read_back_before_they_are_stored() -> None:
    inner = MemoryStore()
    await inner.record_put("hints", "old", {"n": 0})
    deferred = DeferredRecords(inner, ["hints"])
    await deferred.record_put("hints", "new", {"n": 1})
    await deferred.record_put("other", "direct", {"n": 2})
    assert await inner.record_get("hints", "new") is None
    assert await inner.record_get("other", "direct") is not None  # not deferred
    got = await deferred.record_get("hints", "new")
    assert got is not None and got.value["n"] == 1
    assert [r.key for r in await deferred.record_list("hints")] == ["new", "old"]
    assert deferred.waiting == 1
    waiting = deferred.drain()
    assert waiting == [("hints", "new", {"n": 1})] and deferred.waiting == 0
    deferred.requeue(waiting)
    await deferred.flush()
    stored = await inner.record_get("hints", "new")
    assert stored is not None and stored.version == 1 and deferred.waiting == 0


async def test_a_failed_save_keeps_the_hints_for_the_next() -> None:
    inner = MemoryStore()
    deferred = DeferredRecords(inner, ["hints"])
    await deferred.record_put("hints", "a", {"n": 1})
    waiting = deferred.drain()
    await deferred.record_put("hints", "a", {"n": 2})  # newer than the failed save's
    deferred.requeue(waiting)
    assert deferred.drain() == [("hints", "a", {"n": 2})]


# --- the effect ledger's commits ride with the state save --------------------------------


async def test_a_once_effect_step_costs_two_synced_commits(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "state.db")
    try:
        book = AtomicAction(name="lookup", fn=lookup, effect=EffectClass.ONCE)
        model = scripted(call("lookup", city="Paris"), call("lookup", city="Rome"), final("ok"))
        agent, _ = make_agent(model, [book], runtime=Runtime(store=store))
        before = store.stats.commits
        result = await agent.run("weather")
        assert result.success and len(result.steps) == 3
        # the session's creation, a claim and a save per tool step, the final save
        assert store.stats.commits - before == 1 + 2 * 2 + 1
        entries = await EffectLedger(store).records(result.task_id)
        assert [e.status for e in entries] == [EffectStatus.COMMITTED] * 2
        assert [e.seq for e in entries] == [1, 2]
        assert [e.result["city"] for e in entries] == ["Paris", "Rome"]
    finally:
        await store.close()


async def test_waiting_commits_are_read_back_and_written_with_the_save(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "state.db")
    try:
        handle = StateHandle(store, "s")
        riders = handle.ledger_store()
        assert isinstance(riders, RidingWrites)
        await store.create("s", {})
        handle.version = 1
        claim = await riders.record_put("ledger", "t/1", {"status": "pending"}, expected_version=0)
        first = await riders.record_put_many([("ledger", "t/1", {"status": "done"}, claim.version)])
        second = await riders.record_put_many([("ledger", "t/1", {"status": "again"}, 2)])
        assert (first[0].version, second[0].version, riders.waiting) == (2, 3, 2)
        seen = await riders.record_get("ledger", "t/1")
        assert seen is not None and seen.value["status"] == "again"
        stored = await store.record_get("ledger", "t/1")
        assert stored is not None and stored.value["status"] == "pending"  # not yet on disk
        with pytest.raises(StaleStateError):
            await riders.record_put_many([("ledger", "t/1", {"status": "x"}, 2)])
        commits = store.stats.commits
        await handle.save(_state())
        assert store.stats.commits == commits + 1 and riders.waiting == 0
        stored = await store.record_get("ledger", "t/1")
        assert stored is not None and stored.version == 3 and stored.value["status"] == "again"
    finally:
        await store.close()


async def test_a_failed_save_still_writes_the_waiting_commits(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "state.db")
    try:
        handle = StateHandle(store, "s")
        riders = handle.ledger_store()
        assert isinstance(riders, RidingWrites)
        await store.create("s", {})
        handle.version = 9  # another writer moved the state on
        await riders.record_put_many([("ledger", "t/1", {"status": "committed"}, 0)])
        with pytest.raises(StaleStateError):
            await handle.save(_state())
        stored = await store.record_get("ledger", "t/1")
        assert stored is not None and stored.value["status"] == "committed"
        assert riders.waiting == 0
    finally:
        await store.close()


async def test_any_other_write_goes_after_what_waits(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "state.db")
    try:
        riders = RidingWrites(store)
        await riders.record_put_many([("ledger", "t/1", {"status": "committed"}, 0)])
        marked = await riders.record_put(
            "ledger", "t/1", {"status": "compensated"}, expected_version=1
        )
        assert marked.version == 2 and riders.waiting == 0
        assert await riders.record_delete("ledger", "t/1")
    finally:
        await store.close()


def test_in_memory_too_the_ledger_s_commits_ride_with_the_save() -> None:
    # One turn of the event loop for a step's save and its bookkeeping, as on disk.
    store = MemoryStore()
    assert isinstance(StateHandle(store, "s").ledger_store(), RidingWrites)


def _state() -> TaskState:
    return TaskState(
        task_id="t", run_id="r", session_id="s", prompt="p", mode="react", phase="collecting"
    )
