"""SQLiteStore's group commit: writes that wait together share one transaction and one sync."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from closedloop import StaleStateError
from closedloop.feedback import SQLiteStore


async def _with_worker_held(store: SQLiteStore, writes: list[Any]) -> list[Any]:
    """Start ``writes`` while the worker thread is busy, so they all wait together."""
    release = threading.Event()
    store._executor.submit(release.wait)
    tasks = [asyncio.ensure_future(w) for w in writes]
    await asyncio.sleep(0)  # every write is queued behind the held worker
    release.set()
    return await asyncio.gather(*tasks, return_exceptions=True)


async def test_waiting_writes_commit_together_and_a_failing_one_alone_is_undone(
    tmp_path: Path,
) -> None:
    async with SQLiteStore(tmp_path / "state.db") as store:
        await store.create("s", {"n": 0})
        before = store.stats.commits
        writes: list[Any] = [store.record_put("ns", f"k{i}", {"i": i}) for i in range(10)]
        writes.insert(5, store.put("s", {"n": 1}, expected_version=99))  # a lost CAS
        writes.append(store.put("s", {"n": 2}, expected_version=1))
        outcomes = await _with_worker_held(store, writes)
        assert store.stats.commits - before == 1
        assert isinstance(outcomes[5], StaleStateError)
        assert [r.value["i"] for r in await store.record_list("ns")] == list(range(10))
        assert (await store.get("s")).to_dict() == {"n": 2}


async def test_a_write_cancelled_before_its_commit_starts_is_never_made(tmp_path: Path) -> None:
    async with SQLiteStore(tmp_path / "state.db") as store:
        release = threading.Event()
        store._executor.submit(release.wait)
        kept = asyncio.ensure_future(store.record_put("ns", "kept", {"a": 1}))
        dropped = asyncio.ensure_future(store.record_put("ns", "dropped", {"a": 2}))
        await asyncio.sleep(0)
        dropped.cancel()
        await asyncio.sleep(0)
        release.set()
        await kept
        with pytest.raises(asyncio.CancelledError):
            await dropped
        assert [r.key for r in await store.record_list("ns")] == ["kept"]
