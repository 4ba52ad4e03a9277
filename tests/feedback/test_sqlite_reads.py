"""SQLiteStore's reads: on the calling thread's own connection in WAL mode, so they never
queue behind the worker's writes; on the worker with ``inline_reads=False``."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

import pytest

from closedloop import ConfigurationError, StoreUnavailableError
from closedloop.feedback import SQLiteStore


async def _read_while_worker_held(store: SQLiteStore, timeout_s: float) -> object:
    """A record read while the worker thread is busy with something else."""
    release = threading.Event()
    store._executor.submit(release.wait)
    try:
        return await asyncio.wait_for(store.record_get("ns", "k"), timeout_s)
    finally:
        release.set()


async def test_a_read_does_not_wait_for_the_worker(tmp_path: Path) -> None:
    async with SQLiteStore(tmp_path / "state.db") as store:
        assert store.inline_reads
        await store.record_put("ns", "k", {"n": 1})
        record = await _read_while_worker_held(store, 5.0)
        assert record is not None and record.value == {"n": 1}


async def test_reads_can_be_kept_on_the_worker(tmp_path: Path) -> None:
    async with SQLiteStore(tmp_path / "state.db", inline_reads=False) as store:
        assert not store.inline_reads
        await store.record_put("ns", "k", {"n": 1})
        with pytest.raises(TimeoutError):
            await _read_while_worker_held(store, 0.3)
        record = await store.record_get("ns", "k")
        assert record is not None and record.value == {"n": 1}


async def test_a_read_sees_every_write_that_returned(tmp_path: Path) -> None:
    async with SQLiteStore(tmp_path / "state.db") as store:
        await store.create("s", {"n": 0})
        for n in range(1, 20):
            snapshot = await store.get("s")
            await store.put("s", {"n": n}, expected_version=snapshot.version)
            assert (await store.get("s")).to_dict() == {"n": n}
            await store.record_put("ns", f"k{n:02d}", {"n": n})
            assert [r.value["n"] for r in await store.record_list("ns")] == list(range(1, n + 1))


async def test_a_read_sees_a_write_another_connection_committed(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    async with SQLiteStore(path) as store, SQLiteStore(path) as other:
        assert await store.record_get("ns", "k") is None
        await other.record_put("ns", "k", {"n": 2})
        record = await store.record_get("ns", "k")
        assert record is not None and record.value == {"n": 2}


async def test_each_thread_reads_on_its_own_connection_and_close_closes_them(
    tmp_path: Path,
) -> None:
    store = SQLiteStore(tmp_path / "state.db")
    await store.record_put("ns", "k", {"n": 3})
    values: list[object] = []

    def elsewhere() -> None:  # another event loop in another thread
        record = asyncio.run(store.record_get("ns", "k"))
        values.append(None if record is None else record.value)

    thread = threading.Thread(target=elsewhere)
    thread.start()
    thread.join(10)
    here = await store.record_get("ns", "k")
    assert values == [{"n": 3}] and here is not None and here.value == {"n": 3}
    readers = list(store._readers.values())
    assert len(readers) == 2
    await store.close()
    for reader in readers:
        with pytest.raises(sqlite3.ProgrammingError):
            reader.execute("SELECT 1")
    with pytest.raises(StoreUnavailableError):
        await store.record_get("ns", "k")


async def test_a_read_only_connection_cannot_write(tmp_path: Path) -> None:
    async with SQLiteStore(tmp_path / "state.db") as store:
        await store.record_get("ns", "k")
        (reader,) = store._readers.values()
        with pytest.raises(sqlite3.OperationalError):
            reader.execute("DELETE FROM records")


async def test_a_file_not_in_wal_mode_reads_on_the_worker() -> None:
    async with SQLiteStore(":memory:") as store:
        assert store.journal_mode == "memory" and not store.inline_reads
        await store.record_put("ns", "k", {"n": 4})
        record = await store.record_get("ns", "k")
        assert record is not None and record.value == {"n": 4} and not store._readers


def test_inline_reads_is_validated(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="inline_reads"):
        SQLiteStore(tmp_path / "state.db", inline_reads="yes")  # type: ignore[arg-type]
