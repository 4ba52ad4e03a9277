"""Synced commits a step costs on the durable store, counted on the SQLite connection itself.

Under ``synchronous="FULL"`` in WAL mode every COMMIT is one fsync of the log, so the
number of COMMIT statements the connection runs is the number of synced writes. The
count comes from SQLite's statement trace, not from the store's own counter, and the two
must agree.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from closedloop.feedback import SQLiteStore

from .conftest import call, final, make_agent, scripted


def lookup(city: str) -> dict[str, Any]:
    """Look a city up."""
    return {"city": city, "temp_c": 20 + len(city)}


def _trace_commits(store: SQLiteStore) -> list[str]:
    """Every COMMIT the store's connection runs from now on (set on its own thread)."""
    seen: list[str] = []

    def trace(statement: str) -> None:
        if statement.strip().upper().startswith("COMMIT"):
            seen.append(statement)

    def install() -> None:
        assert store._conn is not None
        store._conn.set_trace_callback(trace)

    store._executor.submit(install).result()
    return seen


async def test_a_read_only_step_costs_one_synced_commit(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "state.db")
    try:
        assert store.synchronous == "FULL" and store.journal_mode == "wal"
        commits = _trace_commits(store)
        before = store.stats.commits
        cities = ["Paris", "Rome", "Oslo", "Lima"]
        model = scripted(*(call("lookup", city=c) for c in cities), final("ok"))
        agent, _ = make_agent(model, [lookup], store=store)
        result = await agent.run("weather")
        assert result.success and len(result.steps) == len(cities) + 1
        assert len(commits) == store.stats.commits - before  # the trace and the counter agree
        # One for the session's creation, then one per step: the state save carries the
        # step's hints (PID history, success memory) in the same transaction.
        assert len(commits) - 1 == len(result.steps)
    finally:
        await store.close()
