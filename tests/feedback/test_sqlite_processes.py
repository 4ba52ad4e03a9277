"""SQLiteStore across real processes: SIGKILL durability and cross-process compare-and-set."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from closedloop.feedback import SQLiteStore, SyncStore

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL is POSIX"),
]

# Commits forever; after each commit returns, prints "<version> <a>". Every commit writes
# two counters that must stay equal and a padding whose length depends on them, so a
# half-applied write would show.
WRITER = r"""
import asyncio, sys
from closedloop import ConfigurationError
from closedloop.feedback import SQLiteStore

def bump(snap):
    a = snap.data["a"] + 1
    return {"a": a, "b": snap.data["b"] + 1, "pad": "x" * (a * 37 % 5000)}

async def main(path):
    store = SQLiteStore(path)
    try:
        await store.create("s", {"a": 0, "b": 0, "pad": ""})
    except ConfigurationError:
        pass  # resuming after a kill
    while True:
        snap = await store.update("s", bump)
        print(snap.version, snap.data["a"], flush=True)

asyncio.run(main(sys.argv[1]))
"""

# Opens the store, says "ready", waits for "go" on stdin, then races for every key. Before
# each key both processes meet at a barrier (a record each, polled), so the two claims of
# one key are made at the same moment rather than one process running ahead.
CLAIMER = r"""
import asyncio, json, sys
from closedloop import StaleStateError
from closedloop.feedback import SQLiteStore

async def main(path, me, other, keys, increments):
    store = SQLiteStore(path)
    print("ready", flush=True)
    sys.stdin.readline()
    won = []
    for k in range(keys):
        await store.record_put("barrier", f"{k}-{me}", {})
        while await store.record_get("barrier", f"{k}-{other}") is None:
            await asyncio.sleep(0)
        try:
            await store.record_put("claims", f"key-{k}", {"by": me}, expected_version=0)
            won.append(k)
        except StaleStateError:
            pass
    for _ in range(increments):
        await store.update("counter", lambda s: {"n": s.data["n"] + 1}, max_attempts=100_000)
    await store.close()
    print(json.dumps(won), flush=True)

asyncio.run(main(*sys.argv[1:4], int(sys.argv[4]), int(sys.argv[5])))
"""


def _spawn(script: str, *args: object) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", script, *map(str, args)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _run_writer_and_kill(path: Path, commits: int) -> list[tuple[int, int]]:
    """Start a writer, SIGKILL it after it reported ``commits`` commits; return all reports."""
    proc = _spawn(WRITER, path)
    assert proc.stdout is not None and proc.stderr is not None
    reported: list[tuple[int, int]] = []
    for line in proc.stdout:
        version, a = map(int, line.split())
        reported.append((version, a))
        if len(reported) >= commits:
            break
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read()
    # Lines already in the pipe were reported to us as well.
    for line in proc.stdout.read().split("\n"):
        parts = line.split()
        if len(parts) == 2:
            reported.append((int(parts[0]), int(parts[1])))
    proc.stdout.close()
    proc.stderr.close()
    assert len(reported) >= commits
    return reported


async def test_sigkill_loses_no_reported_commit_and_leaves_no_partial_one(
    tmp_path: Path,
) -> None:
    path = tmp_path / "durable.db"
    last_seen = 1  # create() writes version 1 before the first reported commit
    for _ in range(3):  # kill, reopen, resume, kill again
        reported = _run_writer_and_kill(path, commits=40)
        # The writer resumed exactly where the reopened file stood: nothing lost, nothing doubled.
        assert reported[0][0] == last_seen + 1
        assert [v for v, _ in reported] == list(range(reported[0][0], reported[-1][0] + 1))
        async with SQLiteStore(path) as store:
            snap = await store.get("s")
        a = snap.data["a"]
        assert isinstance(a, int)
        assert snap.version >= reported[-1][0]  # every commit it told us about is there
        assert a == snap.data["b"] == snap.version - 1  # and none is half-applied
        assert snap.data["pad"] == "x" * (a * 37 % 5000)
        last_seen = snap.version
        with sqlite3.connect(path) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_two_processes_racing_claims_each_key_has_exactly_one_winner(tmp_path: Path) -> None:
    path = tmp_path / "claims.db"
    keys, increments = 60, 50
    with SyncStore(SQLiteStore(path)) as setup:  # a session both processes will update
        setup.create("counter", {"n": 0})

    procs = [
        _spawn(CLAIMER, path, me, other, keys, increments)
        for me, other in (("left", "right"), ("right", "left"))
    ]
    for proc in procs:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
    for proc in procs:  # release both at once
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    won: dict[str, set[int]] = {}
    for name, proc in zip(("left", "right"), procs, strict=True):
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        won[name] = set(json.loads(out.strip().splitlines()[-1]))

    assert won["left"].isdisjoint(won["right"])
    assert won["left"] | won["right"] == set(range(keys))
    with SyncStore(SQLiteStore(path)) as store:
        for k in range(keys):
            record = store.record_get("claims", f"key-{k}")
            assert record is not None and record.version == 1
            winner = "left" if k in won["left"] else "right"
            assert record.value["by"] == winner
        # Read-modify-CAS across processes lost no increment either.
        counter = store.get("counter")
        assert counter.data["n"] == 2 * increments
        assert counter.version == 1 + 2 * increments
