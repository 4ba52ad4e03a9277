"""A state save and the records that ride along with it: all of it, or none of it."""

from __future__ import annotations

from pathlib import Path

import pytest

from closedloop import StaleStateError
from closedloop.feedback import MemoryStore, SQLiteStore
from closedloop.feedback._store import BaseStore


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> BaseStore:
    made: BaseStore = MemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / "s.db")
    yield made  # type: ignore[misc]
    await made.close()


async def test_the_state_and_its_records_are_written_together(store: BaseStore) -> None:
    await store.create("s", {"step": 0})
    await store.record_put("pid", "lookup", {"errors": [0.5]})
    snapshot = await store.put_with_records(
        "s",
        {"step": 1},
        expected_version=1,
        records=[("pid", "lookup", {"errors": [0.5, 1.0]}), ("hints", "new", {"n": 1})],
    )
    assert snapshot.version == 2 and snapshot.to_dict() == {"step": 1}
    pid = await store.record_get("pid", "lookup")
    assert pid is not None and pid.version == 2 and list(pid.value["errors"]) == [0.5, 1.0]
    new = await store.record_get("hints", "new")
    assert new is not None and new.version == 1 and new.value["n"] == 1


async def test_a_lost_compare_and_set_writes_no_record(store: BaseStore) -> None:
    await store.create("s", {"step": 0})
    with pytest.raises(StaleStateError):
        await store.put_with_records(
            "s", {"step": 1}, expected_version=7, records=[("hints", "k", {"n": 1})]
        )
    assert await store.record_get("hints", "k") is None
    assert (await store.get("s")).version == 1


async def test_a_lost_compare_and_set_writes_no_conditional_write_either(store: BaseStore) -> None:
    await store.create("s", {"step": 0})
    claimed = await store.record_put("ledger", "t/1", {"status": "pending"}, expected_version=0)
    with pytest.raises(StaleStateError):
        await store.put_with_records(
            "s",
            {"step": 1},
            expected_version=7,
            writes=[("ledger", "t/1", {"status": "committed"}, claimed.version)],
        )
    entry = await store.record_get("ledger", "t/1")
    assert entry is not None and entry.version == 1 and entry.value["status"] == "pending"
    assert (await store.get("s")).version == 1


async def test_sqlite_keeps_all_of_it_after_reopening(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    try:
        await store.create("s", {"step": 0})
        before = store._conn.total_changes  # type: ignore[union-attr]
        await store.put_with_records(
            "s", {"step": 1}, expected_version=1, records=[("a", "1", {}), ("a", "2", {})]
        )
        assert store._conn.total_changes - before == 3  # type: ignore[union-attr]
        reopened = SQLiteStore(tmp_path / "s.db")
        try:
            assert [r.key for r in await reopened.record_list("a")] == ["1", "2"]
        finally:
            await reopened.close()
    finally:
        await store.close()


async def test_conditional_records_are_written_all_or_none(store: BaseStore) -> None:
    await store.record_put("seq", "t", {"seq": 1})
    written = await store.record_put_many(
        [("seq", "t", {"seq": 2}, 1), ("ledger", "t/e", {"status": "committed"}, 0)]
    )
    assert [r.version for r in written] == [2, 1]
    with pytest.raises(StaleStateError):
        await store.record_put_many(
            [("seq", "t", {"seq": 3}, 2), ("ledger", "t/e", {"status": "again"}, 0)]
        )
    seq = await store.record_get("seq", "t")
    assert seq is not None and seq.version == 2 and seq.value["seq"] == 2  # first item undone
    entry = await store.record_get("ledger", "t/e")
    assert entry is not None and entry.value["status"] == "committed"


async def test_conditional_writes_ride_in_the_same_save(store: BaseStore) -> None:
    await store.create("s", {"step": 0})
    claimed = await store.record_put("ledger", "t/1", {"status": "pending"}, expected_version=0)
    await store.put_with_records(
        "s",
        {"step": 1},
        expected_version=1,
        writes=[
            ("ledger", "t/1", {"status": "committed"}, claimed.version),
            ("ledger.seq", "t", {"seq": 1}, 0),
        ],
    )
    entry = await store.record_get("ledger", "t/1")
    assert entry is not None and entry.version == 2 and entry.value["status"] == "committed"
    seq = await store.record_get("ledger.seq", "t")
    assert seq is not None and seq.version == 1 and seq.value["seq"] == 1
    assert (await store.get("s")).version == 2


async def test_sqlite_a_stale_write_leaves_the_whole_save_unwritten(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    try:
        await store.create("s", {"step": 0})
        await store.record_put("ledger", "t/1", {"status": "pending"})
        commits = store.stats.commits
        with pytest.raises(StaleStateError):
            await store.put_with_records(
                "s",
                {"step": 1},
                expected_version=1,
                records=[("hints", "k", {"n": 1})],
                writes=[("ledger", "t/1", {"status": "committed"}, 5)],
            )
        assert (await store.get("s")).version == 1
        assert await store.record_get("hints", "k") is None
        entry = await store.record_get("ledger", "t/1")
        assert entry is not None and entry.value["status"] == "pending"
        assert store.stats.commits == commits  # rolled back: nothing committed
        await store.put_with_records(
            "s", {"step": 1}, expected_version=1, writes=[("ledger", "t/1", {"n": 2}, 1)]
        )
        assert store.stats.commits == commits + 1  # the state and the write: one commit
    finally:
        await store.close()
