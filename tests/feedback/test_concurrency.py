"""200 sessions updating at once: isolation, no lost update, CAS retries counted."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from closedloop.feedback import MemoryStore, Snapshot, SQLiteStore
from closedloop.feedback._store import BaseStore

SESSIONS = 200
UPDATES = 10  # per session
HOT_WRITERS = 20  # of the 200 also increment one shared session, to force contention
HOT_UPDATES = 5


async def _run_workload(stores: list[BaseStore]) -> None:
    """Drive ``SESSIONS`` workers over ``stores`` (round-robin) and check every invariant."""
    leaks: list[str] = []
    await stores[0].create("hot", {"count": 0, "by": {}})

    async def worker(i: int) -> None:
        store = stores[i % len(stores)]
        sid = f"session-{i:03d}"
        token = f"secret-of-{i}"
        await store.create(sid, {"owner": sid, "token": token, "count": 0, "history": []})
        for n in range(UPDATES):

            def bump(snap: Snapshot, n: int = n) -> dict[str, Any]:
                if snap.data["owner"] != sid or snap.data["token"] != token:
                    leaks.append(f"{sid} saw {dict(snap.data)}")
                history = [*snap.to_dict()["history"], n]
                return {
                    "owner": sid,
                    "token": token,
                    "count": snap.data["count"] + 1,  # type: ignore[operator]
                    "history": history,
                }

            await store.update(sid, bump)
            if i < HOT_WRITERS and n < HOT_UPDATES:

                def hot(snap: Snapshot) -> dict[str, Any]:
                    by = snap.to_dict()["by"]
                    by[sid] = by.get(sid, 0) + 1
                    return {"count": snap.data["count"] + 1, "by": by}  # type: ignore[operator]

                # Every hot writer loses most rounds; allow enough attempts to get through.
                await store.update("hot", hot, max_attempts=10_000)

    await asyncio.gather(*(worker(i) for i in range(SESSIONS)))

    assert leaks == []
    reader = stores[0]
    for i in range(SESSIONS):
        snap = await reader.get(f"session-{i:03d}")
        # No lost update: every increment landed, in order, on its own session only.
        assert snap.to_dict() == {
            "owner": f"session-{i:03d}",
            "token": f"secret-of-{i}",
            "count": UPDATES,
            "history": list(range(UPDATES)),
        }
        assert snap.version == 1 + UPDATES
    hot = await reader.get("hot")
    assert hot.data["count"] == HOT_WRITERS * HOT_UPDATES
    assert hot.version == 1 + HOT_WRITERS * HOT_UPDATES
    assert dict(hot.data["by"]) == {f"session-{i:03d}": HOT_UPDATES for i in range(HOT_WRITERS)}  # type: ignore[arg-type]

    retries = sum(s.stats.cas_retries for s in stores)
    conflicts = sum(s.stats.cas_conflicts for s in stores)
    # The shared session was contended, so updates lost races and were retried; each
    # conflict inside update() is followed by exactly one retry.
    assert retries > 0
    assert retries == conflicts


async def test_200_sessions_memory_store() -> None:
    store = MemoryStore()
    await _run_workload([store])
    await store.close()


@pytest.mark.parametrize("connections", [1, 2])
async def test_200_sessions_sqlite_store(tmp_path: Path, connections: int) -> None:
    # Two store objects on one file are two connections racing through SQLite's own
    # locking, not only through one worker thread. Default settings (synchronous=FULL).
    path = tmp_path / "state.db"
    stores: list[BaseStore] = [SQLiteStore(path) for _ in range(connections)]
    try:
        await _run_workload(stores)
    finally:
        for s in stores:
            await s.close()
    # The file, reopened, holds the same final state.
    async with SQLiteStore(path) as reopened:
        assert (await reopened.get("hot")).data["count"] == HOT_WRITERS * HOT_UPDATES
        assert (await reopened.get(f"session-{SESSIONS - 1:03d}")).data["count"] == UPDATES
