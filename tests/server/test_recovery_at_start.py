"""Recovery at start on the embedded default: one ``closedloop serve`` on SQLite, killed with
SIGKILL at each phase of a run with an irreversible effect, then started again on the same
store. With nobody asking, the restarted service takes the run over: it finishes with the
world holding exactly one order (counted in the world's own file), or, with no reconciler
and an effect that may have reached the world, it waits as a handover item. The run's
Idempotency-Key answers the recovered run.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from closedloop.server._recovery import is_orphaned

pytestmark = pytest.mark.integration

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from takeover_agents import orders_in  # noqa: E402
from test_takeover import Deployment, _wait_for, serve  # noqa: E402

RECOVERED_WITHIN_S = 10.0
serving = contextlib.contextmanager(serve)


def _post_held_run(
    deployment: Deployment, agent: str, tmp_path: Path, hold_at: str
) -> tuple[str, dict[str, Any], str, Path, str]:
    session = deployment.call("POST", "/v1/sessions").json()["id"]
    hold = tmp_path / f"hold-{uuid.uuid4().hex[:6]}"
    hold.mkdir()
    world, customer = tmp_path / "world.jsonl", f"c{uuid.uuid4().hex[:8]}"
    body = {
        "agent": agent,
        "task": "order",
        "params": {
            "world": str(world),
            "hold": str(hold),
            "customer": customer,
            "hold_at": hold_at,
        },
    }
    key = f"order-{customer}"
    started = deployment.call(
        "POST", f"/v1/sessions/{session}/runs", json=body, headers={"Idempotency-Key": key}
    )
    assert started.status_code == 202, started.text
    victim = int(_wait_for(hold / "started"))
    assert victim == deployment.process.pid  # the embedded default: one process runs it
    os.kill(victim, signal.SIGKILL)
    deployment.process.wait(timeout=30)
    (hold / "release").write_text("go")  # the recovered run does not hold again
    path = f"/v1/sessions/{session}/runs/{started.json()['id']}"
    return path, body, key, world, customer


def _settled(deployment: Deployment, path: str, began: float) -> tuple[dict[str, Any], float]:
    """The run's record once it stops running, and the seconds since ``began``."""
    done = deployment.poll("GET", path, lambda r: r.json()["status"] != "running").json()
    return done, time.monotonic() - began


@pytest.mark.parametrize(
    ("hold_at", "orders_before"),
    [("before_claim", 0), ("before_effect", 0), ("after_effect", 1), ("after_commit", 1)],
)
def test_a_killed_embedded_server_finishes_its_run_after_restart_with_one_effect(
    hold_at: str, orders_before: int, tmp_path: Path
) -> None:
    store = f"sqlite://{tmp_path / 'state.db'}"
    with serving(store, tmp_path / "runs", workers=1) as deployment:
        path, body, key, world, customer = _post_held_run(
            deployment, "held-orderer", tmp_path, hold_at
        )
    assert len(orders_in(world, customer)) == orders_before

    restarted = time.monotonic()  # the restart's clock starts before the process does
    with serving(store, tmp_path / "runs", workers=1) as again:
        again.token = deployment.token  # the same caller: its runs are in its key's scope
        done, took_s = _settled(again, path, restarted)
        assert (done["status"], done["success"]) == ("done", True), done
        assert took_s < RECOVERED_WITHIN_S, took_s
        assert done["takeovers"] == 1 and done["worker"] == again.process.pid
        assert len(orders_in(world, customer)) == 1  # counted by the world
        session = path.split("/")[3]
        repeated = again.call(
            "POST", f"/v1/sessions/{session}/runs", json=body, headers={"Idempotency-Key": key}
        )
        assert repeated.json()["id"] == done["id"], repeated.text


def test_a_pending_effect_without_a_reconciler_becomes_a_handover_at_restart(
    tmp_path: Path,
) -> None:
    store = f"sqlite://{tmp_path / 'state.db'}"
    with serving(store, tmp_path / "runs", workers=1) as deployment:
        path, _, _, world, customer = _post_held_run(
            deployment, "blind-orderer", tmp_path, "after_effect"
        )
    restarted = time.monotonic()  # the restart's clock starts before the process does
    with serving(store, tmp_path / "runs", workers=1) as again:
        again.token = deployment.token  # the same caller: its runs are in its key's scope
        done, took_s = _settled(again, path, restarted)
        assert done["status"] == "handover" and done["handover_id"], done
        assert took_s < RECOVERED_WITHIN_S
        item = again.call("GET", f"/v1/handovers/{done['handover_id']}").json()
        assert item["audit"]["kind"] == "pending_effect"
        assert len(orders_in(world, customer)) == 1  # applied once, not again


def test_only_a_gone_worker_on_this_host_is_an_orphan() -> None:
    alive, me = os.getppid(), os.getpid()
    running = {"status": "running", "host": "here"}
    assert is_orphaned({**running, "worker": me}, host="here", pid=me)
    assert not is_orphaned({**running, "worker": alive}, host="here", pid=me)
    assert not is_orphaned({**running, "worker": alive, "host": "elsewhere"}, host="here", pid=me)
    assert not is_orphaned({**running, "worker": None}, host="here", pid=me)  # queued
    assert not is_orphaned({"status": "done", "worker": me, "host": "here"}, host="here", pid=me)
    gone = _a_dead_pid()
    assert is_orphaned({**running, "worker": gone}, host="here", pid=me)
    assert is_orphaned({"status": "running", "worker": gone}, host="here", pid=me)  # older record


def _a_dead_pid() -> int:
    import subprocess

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


async def test_of_two_processes_claiming_one_orphan_only_one_wins(tmp_path: Path) -> None:
    from closedloop.feedback import SQLiteStore
    from closedloop.server._recovery import _claim
    from closedloop.server._run_records import RUNS

    store = SQLiteStore(tmp_path / "state.db")
    try:
        await store.record_put(RUNS, "s/r", {"status": "running", "worker": _a_dead_pid()})
        seen = await store.record_get(RUNS, "s/r")
        assert seen is not None
        first = await _claim(store, seen, "here", 101)
        second = await _claim(store, seen, "here", 102)  # read the same version: too late
        assert first is not None and second is None
        stored = await store.record_get(RUNS, "s/r")
        assert stored is not None and stored.to_dict()["claimed_by"] == {"host": "here", "pid": 101}
    finally:
        await store.close()
