"""Automatic takeover: real workers (``closedloop serve --workers 2``) on a real redis-server,
runs dispatched through a Redis stream, a worker killed with SIGKILL in the middle of an
effect. A live worker takes the run over within the bounded time and the world holds one
effect; with no reconciler, the run waits as a handover item until a person chooses.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from closedloop.server import ApiKeys, open_store

pytestmark = pytest.mark.integration

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from takeover_agents import orders_in  # noqa: E402

WORKER = "X-Closedloop-Worker"
TAKEOVER_AFTER_S = 4.0
BOUND_S = 60.0


@dataclass
class Deployment:
    url: str
    token: str
    process: subprocess.Popen[str]

    def call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.token}", **kwargs.pop("headers", {})}
        return httpx.request(method, self.url + path, headers=headers, timeout=30.0, **kwargs)

    def poll(
        self, method: str, path: str, done: Callable[[httpx.Response], bool]
    ) -> httpx.Response:
        """Until ``done(response)``, bounded; a request a dying worker accepted is retried."""
        deadline = time.monotonic() + BOUND_S
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.TransportError):
                response = self.call(method, path)
                if done(response):
                    return response
            time.sleep(0.05)  # an integration test polling real processes
        raise AssertionError(f"{method} {path}: the condition never held in {BOUND_S} s")


def _token(store_url: str) -> str:
    async def create() -> str:
        store = open_store(store_url)
        try:
            return (await ApiKeys(store).create("takeover-test")).token
        finally:
            await store.close()

    return asyncio.run(create())


def serve(store_url: str, runs: Path, workers: int = 2) -> Iterator[Deployment]:
    """``closedloop serve --workers N`` on a free loopback port, stopped at the end."""
    token = _token(store_url)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
        "PYTHONUNBUFFERED": "1",
    }
    command = [sys.executable, "-m", "closedloop", "serve", "--workers", str(workers)]
    command += ["--port", "0", "--store", store_url, "--runs-dir", str(runs)]
    command += ["--agents", "takeover_agents:register", "--log-level", "warning"]
    command += ["--takeover-after", str(TAKEOVER_AFTER_S)]
    # The agents bring their own model; the service's is built per run but never called.
    command += ["--model", "openai-compatible:http://127.0.0.1:9/v1#unused"]
    process = subprocess.Popen(
        command,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        assert process.stdout is not None
        seen: list[str] = []
        for line in process.stdout:
            seen.append(line)
            found = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
            if found:
                break
        else:
            raise AssertionError("the service did not start:\n" + "".join(seen))
        deployment = Deployment(f"http://127.0.0.1:{found.group(1)}", token, process)
        pids: set[str] = set()
        deployment.poll(
            "GET", "/healthz", lambda r: bool(pids.add(r.headers[WORKER])) or len(pids) == workers
        )
        yield deployment
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)  # the group this test started
            process.wait()


@pytest.fixture
def deployment(redis_url: str, tmp_path: Path) -> Iterator[Deployment]:
    yield from serve(redis_url, tmp_path / "runs")


def _wait_for(path: Path) -> str:
    deadline = time.monotonic() + BOUND_S
    while time.monotonic() < deadline:
        if path.exists() and path.read_text():
            return path.read_text()
        time.sleep(0.02)  # an integration test waiting on a real worker
    raise AssertionError(f"{path} never appeared")


def _start_held_run(
    deployment: Deployment, agent: str, tmp_path: Path
) -> tuple[str, str, int, Path, str]:
    """Start a run whose effect holds; kill its worker there. Returns the run's path, the
    session, the victim's pid, the world file and the customer."""
    session = deployment.call("POST", "/v1/sessions").json()["id"]
    hold = tmp_path / f"hold-{uuid.uuid4().hex[:6]}"
    hold.mkdir()
    world = tmp_path / "world.jsonl"
    customer = f"c{uuid.uuid4().hex[:8]}"
    params = {"world": str(world), "hold": str(hold), "customer": customer}
    started = deployment.call(
        "POST",
        f"/v1/sessions/{session}/runs",
        json={"agent": agent, "task": "order", "params": params},
    )
    assert started.status_code == 202, started.text
    path = f"/v1/sessions/{session}/runs/{started.json()['id']}"
    victim = int(_wait_for(hold / "started"))
    assert len(orders_in(world, customer)) == 1  # applied, not yet committed
    os.kill(victim, signal.SIGKILL)
    (hold / "release").write_text("go")  # the taker's call, if any, does not hold
    return path, session, victim, world, customer


def test_a_run_whose_worker_was_killed_is_taken_over_and_its_effect_applied_once(
    deployment: Deployment, tmp_path: Path
) -> None:
    killed_at = time.monotonic()
    path, _, victim, world, customer = _start_held_run(deployment, "held-orderer", tmp_path)

    taken = deployment.poll("GET", path, lambda r: bool(r.json().get("takeovers")))
    took_s = time.monotonic() - killed_at
    assert taken.json()["worker"] != victim
    # Idle past the takeover time, found at the next heartbeat: well inside the bound.
    assert took_s < 30.0, took_s
    done = deployment.poll("GET", path, lambda r: r.json()["status"] != "running").json()
    assert (done["status"], done["success"], done["takeovers"]) == ("done", True, 1), done[
        "message"
    ]
    assert done["worker"] != victim
    orders = orders_in(world, customer)
    assert len(orders) == 1 and orders[0]["pid"] == victim
    assert done["fields"]["order_id"] == f"ORD-{customer}"
    steps = deployment.call("GET", f"{path}/trace").json()["steps"]
    notes = [n for s in steps for n in s["notes"] if n.startswith("resumed after")]
    assert notes and notes[0].endswith("ledger reconciled: place_order committed")
    # The queue owns the run: a manual recovery is refused.
    assert deployment.call("POST", f"{path}/recover").status_code == 409


def test_a_pending_effect_without_a_reconciler_waits_for_a_persons_choice(
    deployment: Deployment, tmp_path: Path
) -> None:
    path, session, _victim, world, customer = _start_held_run(deployment, "blind-orderer", tmp_path)
    waiting = deployment.poll("GET", path, lambda r: r.json()["status"] != "running").json()
    assert waiting["status"] == "handover" and waiting["handover_id"], waiting
    handover = f"/v1/handovers/{waiting['handover_id']}"
    item = deployment.call("GET", handover).json()
    audit = item["audit"]
    assert audit["kind"] == "pending_effect"
    assert sorted(audit["choices"]) == ["abandon", "mark_applied", "retry"]
    (effect,) = audit["pending_effects"]
    assert (effect["tool"], effect["arguments"]) == ("place_order", {"customer": customer})
    assert effect["idempotency_key"].startswith(waiting["task_id"] or waiting["id"])
    # the ledger names its claimant (the run's task-state session), not only a pid
    assert effect["claimed_by"] == waiting["agent_session"]
    assert isinstance(effect["claimed_at"], float)
    assert "may have been applied" in effect["world"]
    listed = deployment.call("GET", "/v1/handovers").json()["handovers"]
    assert [h["id"] for h in listed] == [waiting["handover_id"]]

    bad = deployment.call("POST", f"{handover}/choose", json={"choice": "maybe"})
    assert bad.status_code == 422 and "'maybe'" in bad.json()["detail"], bad.text
    approve = deployment.call("POST", f"{handover}/approve")
    assert approve.status_code == 422 and "choose" in approve.json()["detail"], approve.text

    result = {"customer": customer, "order_id": f"ORD-{customer}"}
    chosen = deployment.call(
        "POST", f"{handover}/choose", json={"choice": "mark_applied", "result": result}
    )
    assert chosen.status_code == 200, chosen.text
    assert chosen.json()["handover"]["settled"] == [effect["idempotency_key"]]
    again = deployment.call("POST", f"{handover}/choose", json={"choice": "retry"})
    assert again.status_code == 409
    done = deployment.poll("GET", path, lambda r: r.json()["status"] not in ("running",)).json()
    assert (done["status"], done["success"]) == ("done", True), done
    assert done["fields"]["order_id"] == f"ORD-{customer}"
    assert len(orders_in(world, customer)) == 1  # marked applied: never run again
    assert session in path
