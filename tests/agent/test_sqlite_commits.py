"""Synced commits a step costs on the durable store, counted on the SQLite connection itself.

Under ``synchronous="FULL"`` in WAL mode every COMMIT is one fsync of the log, so the
number of COMMIT statements the connection runs is the number of synced writes. The
count comes from SQLite's statement trace, not from the store's own counter, and the two
must agree.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

from closedloop.agent import RunResult, Runtime
from closedloop.execution import AtomicAction, EffectClass
from closedloop.feedback import SQLiteStore

from .conftest import call, final, make_agent, scripted

CITIES = ["Paris", "Rome", "Oslo", "Lima"]


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
        agent, _ = make_agent(model, [lookup], runtime=Runtime(store=store))
        result = await agent.run("weather")
        assert result.success and len(result.steps) == len(cities) + 1
        assert len(commits) == store.stats.commits - before  # the trace and the counter agree
        # One for the session's creation, then one per step: the state save carries the
        # step's hints (PID history, success memory) in the same transaction.
        assert len(commits) - 1 == len(result.steps)
    finally:
        await store.close()


def send(city: str) -> dict[str, Any]:
    """Send a postcard to a city (at most once)."""
    return {"sent": city}


async def test_a_step_with_an_irreversible_effect_costs_two_synced_commits(
    tmp_path: Path,
) -> None:
    store = SQLiteStore(tmp_path / "state.db")
    try:
        commits = _trace_commits(store)
        before = store.stats.commits
        action = AtomicAction(name="send", fn=send, effect=EffectClass.IRREVERSIBLE)
        model = scripted(*(call("send", city=c) for c in CITIES), final("sent"))
        agent, _ = make_agent(model, [action], runtime=Runtime(store=store))
        result = await agent.run("postcards")
        assert result.success and len(result.steps) == len(CITIES) + 1
        assert len(commits) == store.stats.commits - before
        # The session's creation; per effect step the claim before the call and the save
        # after it, which carries the ledger's commit; one for the final step.
        assert len(commits) == 1 + 2 * len(CITIES) + 1
    finally:
        await store.close()


async def _run_alone(path: Path) -> int:
    """Synced commits of one read-only run on its own file."""
    store = SQLiteStore(path)
    try:
        commits = _trace_commits(store)
        model = scripted(*(call("lookup", city=c) for c in CITIES), final("ok"))
        agent, _ = make_agent(model, [lookup], runtime=Runtime(store=store))
        assert (await agent.run("weather")).success
        return len(commits)
    finally:
        await store.close()


def _hold(store: SQLiteStore, letting_go: threading.Event | None = None) -> threading.Event:
    """Queue a hold on the store's worker thread, let the hold before it go
    (``letting_go``), and return, with the event that frees the new hold, once the worker
    has reached it. The event loop blocks meanwhile, on purpose: no run can queue a write
    before the worker has run what was queued ahead of the hold (the batch's commit and the
    leftover turns that find no write), so none of those turns commits a lone write."""
    started, release = threading.Event(), threading.Event()

    def hold() -> None:
        started.set()
        release.wait()

    store._executor.submit(hold)
    if letting_go is not None:
        letting_go.set()
    assert started.wait(30), "the store's worker never reached the hold"
    return release


async def _in_lockstep(store: SQLiteStore, runs: list[asyncio.Task[RunResult]]) -> None:
    """Hold the store's worker until every unfinished run has a write waiting, then let it
    go: each time, the writes of all the runs wait together, as under load."""
    release = _hold(store)
    try:
        while not all(r.done() for r in runs):
            for _ in range(100_000):
                if len(store._writes) >= sum(not r.done() for r in runs):
                    break
                await asyncio.sleep(0)
            else:
                raise AssertionError("the runs never all waited for the store")
            release = _hold(store, letting_go=release)
    finally:
        release.set()


async def test_group_commit_joins_concurrent_sessions_writes_into_one_commit(
    tmp_path: Path,
) -> None:
    alone = await _run_alone(tmp_path / "alone.db")
    sessions = 4
    store = SQLiteStore(tmp_path / "shared.db")
    try:
        commits = _trace_commits(store)
        before = store.stats.commits
        agents = [
            make_agent(
                scripted(*(call("lookup", city=c) for c in CITIES), final("ok")),
                [lookup],
                runtime=Runtime(store=store),
            )[0]
            for _ in range(sessions)
        ]
        runs = [asyncio.ensure_future(a.run("weather")) for a in agents]
        await _in_lockstep(store, runs)
        results = [await r for r in runs]
        assert all(r.success for r in results)
        assert len(commits) == store.stats.commits - before
        steps = sum(len(r.steps) for r in results)
        # Alone, a run commits once for its session and once a step; side by side, the
        # writes that wait together share a commit: four runs cost what one did.
        assert alone == 1 + len(CITIES) + 1
        assert len(commits) == alone < sessions * alone
        assert len(commits) / steps < 1 / 2
    finally:
        await store.close()
