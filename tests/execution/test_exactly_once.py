"""Exactly once across SIGKILL: a real payment endpoint, a real SQLite ledger, real processes.

A child process pays through the ledger and is killed with SIGKILL at a chosen point; the
parent then resumes through the same ledger file. The endpoint counts every POST it gets
(it does not deduplicate), so "exactly once" is measured at the receiving end: after the
resume it has seen the payment once, or the ledger says the payment needs reconciliation
(and a reconciler that asks the endpoint resolves it) -- never twice.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import signal
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import parse_qs, urlparse

import httpx
import pytest

from closedloop import ReconciliationRequiredError
from closedloop.execution import EffectLedger, EffectStatus, Executor, OutcomeStatus
from closedloop.feedback import SQLiteStore

pytestmark = pytest.mark.integration

CHILD = Path(__file__).with_name("_pay_child.py")
# Only a guard against a hung child; the test never waits on a timer otherwise.
CHILD_DEADLINE_S = 120.0


def _load_child() -> ModuleType:
    spec = importlib.util.spec_from_file_location("closedloop_tests_pay_child", CHILD)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


child = _load_child()


class PaymentServer(ThreadingHTTPServer):
    """POST /pay applies a payment (every call counts); GET /count?order= reports them."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.lock = threading.Lock()
        self.count: Counter[str] = Counter()
        self.last: dict[str, dict[str, Any]] = {}

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"


class _Handler(BaseHTTPRequestHandler):
    server: PaymentServer

    def do_POST(self) -> None:
        if self.path != "/pay":
            self._reply(404, {"error": "no such path"})
            return
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with self.server.lock:
            self.server.count[body["order"]] += 1
            n = self.server.count[body["order"]]
            receipt = {"payment_id": f"{body['order']}-p{n}", "amount_cents": body["amount_cents"]}
            self.server.last[body["order"]] = receipt
        self._reply(200, receipt)

    def do_GET(self) -> None:
        url = urlparse(self.path)
        if url.path != "/count":
            self._reply(404, {"error": "no such path"})
            return
        order = parse_qs(url.query).get("order", [""])[0]
        with self.server.lock:
            body = {
                "count": self.server.count[order],
                "total": sum(self.server.count.values()),
                "last": self.server.last.get(order),
            }
        self._reply(200, body)

    def _reply(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep the test output clean


@pytest.fixture
def server() -> Iterator[PaymentServer]:
    srv = PaymentServer()
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join()


async def count(server: PaymentServer) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=server.url) as client:
        response = await client.get("/count", params={"order": child.ARGS["order"]})
        return dict(response.json())


async def run_child(db: Path, url: str, task_id: str, halt_at: str) -> str:
    """Run the child; when it halts at ``halt_at``, SIGKILL it. Returns its last line."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(CHILD),
        str(db),
        url,
        task_id,
        halt_at,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    try:
        line = (await asyncio.wait_for(proc.stdout.readline(), CHILD_DEADLINE_S)).decode()
        if line.startswith("HALTED"):
            proc.send_signal(signal.SIGKILL)
            assert await proc.wait() == -signal.SIGKILL
        else:
            assert await asyncio.wait_for(proc.wait(), CHILD_DEADLINE_S) == 0, line
        return line.strip()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        if proc.stderr is not None and (err := (await proc.stderr.read()).decode()):
            assert "Traceback" not in err, err


async def ledger_statuses(db: Path, task_id: str) -> list[EffectStatus]:
    store = SQLiteStore(db)
    try:
        return [r.status for r in await EffectLedger(store).records(task_id)]
    finally:
        await store.close()


# (halt point, what the ledger holds after the kill, calls the endpoint saw before resume)
KILL_POINTS = [
    ("started", [], 0),  # before anything was written
    ("claimed", [EffectStatus.PENDING], 0),  # claimed, before the HTTP call
    ("called", [EffectStatus.PENDING], 1),  # after the HTTP call, before the commit
    ("committed", [EffectStatus.COMMITTED], 1),  # after the commit
    ("none", [EffectStatus.COMMITTED], 1),  # not killed
]


@pytest.mark.parametrize(("halt_at", "left", "seen"), KILL_POINTS)
async def test_resume_without_reconciler_never_pays_twice(
    server: PaymentServer, tmp_path: Path, halt_at: str, left: list[EffectStatus], seen: int
) -> None:
    db = tmp_path / "state.db"
    last = await run_child(db, server.url, "trip-1", halt_at)
    assert last.startswith("HALTED" if halt_at != "none" else "DONE"), last
    assert await ledger_statuses(db, "trip-1") == left
    assert (await count(server))["count"] == seen

    store = SQLiteStore(db)
    try:
        ledger = EffectLedger(store, owner=child.OWNER)
        pay = child.pay_action(server.url)
        if EffectStatus.PENDING in left:
            with pytest.raises(ReconciliationRequiredError):
                await ledger.reconcile_pending("trip-1", [pay])
        else:
            assert await ledger.reconcile_pending("trip-1", [pay]) == []
        args = {**child.ARGS, "request_id": "parent-resume"}
        outcome = await Executor(ledger).execute(pay, args, task_id="trip-1", step=child.TASK_STEP)
    finally:
        await store.close()

    after = await count(server)
    assert after["total"] == after["count"] <= 1  # never twice, and no stray order
    if EffectStatus.PENDING in left:
        assert outcome.status is OutcomeStatus.RECONCILIATION_REQUIRED
        assert after["count"] == seen  # the resume did not call the endpoint
    elif EffectStatus.COMMITTED in left:
        assert outcome.status is OutcomeStatus.REPLAYED
        assert outcome.result == after["last"]  # the receipt recorded by the child
        assert after["count"] == 1
    else:
        assert outcome.status is OutcomeStatus.SUCCEEDED
        assert after["count"] == 1


@pytest.mark.parametrize(("halt_at", "left", "seen"), KILL_POINTS)
async def test_resume_with_reconciler_pays_exactly_once(
    server: PaymentServer, tmp_path: Path, halt_at: str, left: list[EffectStatus], seen: int
) -> None:
    db = tmp_path / "state.db"
    await run_child(db, server.url, "trip-2", halt_at)
    assert (await count(server))["count"] == seen

    store = SQLiteStore(db)
    try:
        ledger = EffectLedger(store, owner=child.OWNER)
        pay = child.pay_action(server.url, with_reconciler=True)
        executor = Executor(ledger, actions=[pay])
        resolved = await executor.resume("trip-2")  # reconcile before anything else
        if EffectStatus.PENDING in left:
            # The endpoint decides: applied if it saw the call, not applied otherwise.
            expected = EffectStatus.COMMITTED if seen else EffectStatus.FAILED
            assert [r.status for r in resolved] == [expected]
        else:
            assert resolved == []
        args = {**child.ARGS, "request_id": "parent-resume"}
        outcome = await executor.execute(pay, args, task_id="trip-2", step=child.TASK_STEP)
        records = await ledger.records("trip-2")
    finally:
        await store.close()

    after = await count(server)
    assert after["count"] == after["total"] == 1  # exactly once
    assert outcome.ok and outcome.result == after["last"]
    assert [r.status for r in records] == [EffectStatus.COMMITTED]
    # Ran here only if the child never reached the endpoint.
    assert outcome.status is (OutcomeStatus.SUCCEEDED if seen == 0 else OutcomeStatus.REPLAYED)


async def test_repeated_crashes_and_resumes_still_pay_once(
    server: PaymentServer, tmp_path: Path
) -> None:
    """Kill after the call, resume in another child that is killed again, then finish."""
    db = tmp_path / "state.db"
    await run_child(db, server.url, "trip-3", "called")
    # The second child finds the effect pending and, having no reconciler, must not pay.
    second = await run_child(db, server.url, "trip-3", "none")
    assert json.loads(second.removeprefix("DONE "))["status"] == "reconciliation_required"
    assert (await count(server))["count"] == 1

    store = SQLiteStore(db)
    try:
        pay = child.pay_action(server.url, with_reconciler=True)
        executor = Executor(EffectLedger(store, owner=child.OWNER), actions=[pay])
        await executor.resume("trip-3")
        third = await executor.execute(
            pay, dict(child.ARGS), task_id="trip-3", step=child.TASK_STEP
        )
    finally:
        await store.close()
    assert third.status is OutcomeStatus.REPLAYED
    assert (await count(server))["count"] == 1
