"""``closedloop serve --workers 2``: real worker processes behind one port, one shared store.

Every response names its worker (``X-Closedloop-Worker``), so each test can show that
two different processes served the calls it relies on. Which worker accepts a new
connection is the kernel's choice: the tests open fresh connections until both have
answered, with a bound on the attempts.
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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from closedloop.server import ApiKeys, open_store
from closedloop_bench.world import WorldHandle, serve_world

HERE = Path(__file__).parent
WORKER = "x-closedloop-worker"
TRIES = 200  # fresh connections before we conclude one worker never answers


@dataclass
class Service:
    url: str
    token: str
    store: str
    world: WorldHandle

    def call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """One request on its own connection (so the kernel may hand it to either worker)."""
        headers = {"Authorization": f"Bearer {self.token}", **kwargs.pop("headers", {})}
        with httpx.Client(base_url=self.url, timeout=60.0) as client:
            return client.request(method, path, headers=headers, **kwargs)

    def until(
        self, method: str, path: str, accept: Callable[[httpx.Response], bool], **kw: Any
    ) -> httpx.Response:
        """Repeat a harmless request until ``accept`` likes the answer (a given worker)."""
        for _ in range(TRIES):
            response = self.call(method, path, **kw)
            if accept(response):
                return response
        raise AssertionError(f"{method} {path}: no acceptable answer in {TRIES} tries")

    def wait_for_end(self, session: str, run: str) -> dict[str, Any]:
        """Follow the run's server-sent events to its end, then read its record."""
        headers = {"Authorization": f"Bearer {self.token}"}
        path = f"/v1/sessions/{session}/runs/{run}"
        with (
            httpx.Client(base_url=self.url, timeout=60.0) as client,
            client.stream("GET", f"{path}/events", headers=headers) as events,
        ):
            for line in events.iter_lines():
                if line == "event: end":
                    break
        record: dict[str, Any] = self.call("GET", path).json()
        return record


def _token(store_url: str) -> str:
    async def create() -> str:
        store = open_store(store_url)
        try:
            return (await ApiKeys(store).create("workers-test")).token
        finally:
            await store.close()

    return asyncio.run(create())


def _serve(store_url: str, world: WorldHandle, runs: Path) -> Iterator[Service]:
    token = _token(store_url)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
        "PYTHONUNBUFFERED": "1",
    }
    command = [sys.executable, "-m", "closedloop", "serve", "--workers", "2", "--port", "0"]
    command += ["--store", store_url, "--world", world.base_url, "--runs-dir", str(runs)]
    command += ["--agents", "worker_agents:register", "--log-level", "warning"]
    # The orderer brings its own model; the service's is built per run but never called.
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
        url = f"http://127.0.0.1:{found.group(1)}"
        service = Service(url, token, store_url, world)
        # Two distinct worker pids: two processes really serve this port.
        pids: set[str] = set()
        service.until(
            "GET", "/healthz", lambda r: bool(pids.add(r.headers[WORKER])) or len(pids) == 2
        )
        yield service
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)  # the group this test started
            process.wait()


@pytest.fixture
def world() -> Iterator[WorldHandle]:
    with serve_world("none", latency_scale=0.0) as handle:
        yield handle


@pytest.fixture(params=["redis", "sqlite"])
def service(
    request: pytest.FixtureRequest, tmp_path: Path, world: WorldHandle
) -> Iterator[Service]:
    if request.param == "redis":
        url: str = request.getfixturevalue("redis_url")
    else:
        url = f"sqlite:///{tmp_path / 'state.db'}"
    yield from _serve(url, world, tmp_path / "runs")


def test_a_session_created_on_one_worker_continues_on_another(service: Service) -> None:
    created = service.call("POST", "/v1/sessions", json={"metadata": {"owner": "a"}})
    assert created.status_code == 201, created.text
    first = created.headers[WORKER]
    session = created.json()["id"]

    other = service.until("GET", f"/v1/sessions/{session}", lambda r: r.headers[WORKER] != first)
    assert other.status_code == 200 and other.json()["metadata"] == {"owner": "a"}

    # An update until one lands on another worker; each that lands anywhere applies.
    patches = 0

    def applied_elsewhere(response: httpx.Response) -> bool:
        nonlocal patches
        assert response.status_code == 200, response.text
        patches += 1
        return response.headers[WORKER] != first

    patched = service.until(
        "PATCH", f"/v1/sessions/{session}", applied_elsewhere, json={"metadata": {"owner": "b"}}
    )
    assert patched.json()["metadata"] == {"owner": "b"}
    back = service.until("GET", f"/v1/sessions/{session}", lambda r: r.headers[WORKER] == first)
    assert back.json()["metadata"] == {"owner": "b"}
    assert back.headers["etag"] == patched.headers["etag"] == f'"{1 + patches}"'


def test_racing_updates_never_both_apply(service: Service) -> None:
    session = service.call("POST", "/v1/sessions").json()["id"]
    path = f"/v1/sessions/{session}"
    workers: set[str] = set()
    rounds = 0
    with ThreadPoolExecutor(max_workers=8) as pool:
        # Two writers from one read: exactly one wins, the other gets 412.
        while len(workers) < 2 and rounds < 20:
            rounds += 1
            etag = service.call("GET", path).headers["etag"]
            answers = list(
                pool.map(
                    lambda n, etag=etag: service.call(  # type: ignore[misc]
                        "PATCH", path, json={"metadata": {"w": n}}, headers={"If-Match": etag}
                    ),
                    range(2),
                )
            )
            assert sorted(r.status_code for r in answers) == [200, 412], [a.text for a in answers]
            workers |= {r.headers[WORKER] for r in answers}
        assert len(workers) == 2, "the racing writers never reached both workers"
        # Writers without If-Match are retried on the newest version: every one applies once.
        answers = list(
            pool.map(
                lambda n: service.call("PATCH", path, json={"metadata": {f"k{n}": n}}),
                range(24),
            )
        )
    assert all(r.status_code == 200 for r in answers), [r.text for r in answers]
    final = service.call("GET", path)
    assert final.headers["etag"] == f'"{1 + rounds + 24}"'
    metadata = final.json()["metadata"]
    assert {k: v for k, v in metadata.items() if k != "w"} == {f"k{n}": n for n in range(24)}


def test_an_effect_sent_twice_with_one_idempotency_key_is_applied_once(
    service: Service,
) -> None:
    session = service.call("POST", "/v1/sessions").json()["id"]
    products = httpx.get(f"{service.world.base_url}/products").json()["products"]
    sku = next(p["sku"] for p in products if p["stock"] >= 50)
    workers_differed = False
    rounds = 0
    with ThreadPoolExecutor(max_workers=2) as pool:
        while not workers_differed and rounds < 10:
            rounds += 1
            customer = f"customer-{uuid.uuid4().hex[:8]}"
            body = {
                "agent": "orderer",
                "task": "order one",
                "params": {"customer": customer, "sku": sku},
            }
            key = {"Idempotency-Key": f"order-{customer}"}
            started = list(
                pool.map(
                    lambda _, body=body, key=key: service.call(  # type: ignore[misc]
                        "POST", f"/v1/sessions/{session}/runs", json=body, headers=key
                    ),
                    range(2),
                )
            )
            # One run, whichever worker each post reached: the second is answered with it.
            codes = sorted(r.status_code for r in started)
            assert codes == [200, 202], [r.text for r in started]
            assert started[0].json()["id"] == started[1].json()["id"]
            workers_differed = started[0].headers[WORKER] != started[1].headers[WORKER]
            run = service.wait_for_end(session, started[0].json()["id"])
            orders = httpx.get(
                f"{service.world.base_url}/orders", params={"customer": customer}
            ).json()["orders"]
            assert len(orders) == 1, orders  # one order, however the two posts interleaved
            assert run["success"] and run["fields"]["order_id"] == orders[0]["order_id"]
    assert workers_differed, "the two posts never reached different workers"
    counts = service.world.counters["orders_create"]
    assert (counts.effects, counts.duplicates) == (rounds, 0)


def _wait_until_dead(pid: int) -> None:
    """Until ``pid`` is gone or a zombie (SIGKILLed, not yet reaped by the supervisor)."""
    deadline = time.monotonic() + 60.0
    while time.monotonic() < deadline:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except FileNotFoundError:
            return
        if stat.rsplit(") ", 1)[1][:1] in ("Z", "X"):
            return
    raise AssertionError(f"worker {pid} is still alive")


def test_a_run_whose_worker_was_killed_resumes_on_another(service: Service, tmp_path: Path) -> None:
    session = service.call("POST", "/v1/sessions").json()["id"]
    products = httpx.get(f"{service.world.base_url}/products").json()["products"]
    sku = next(p["sku"] for p in products if p["stock"] >= 5)
    marker = tmp_path / "died"
    params = {"customer": "fragile-customer", "sku": sku, "die_once": str(marker)}
    body = {"agent": "fragile-orderer", "task": "order one", "params": params}
    started = service.call("POST", f"/v1/sessions/{session}/runs", json=body)
    assert started.status_code == 202, started.text
    run = started.json()["id"]
    path = f"/v1/sessions/{session}/runs/{run}"
    queued = service.store.startswith("redis://")  # runs go through the run queue

    deadline = time.monotonic() + 60.0
    while not marker.exists() and time.monotonic() < deadline:
        # The run goes on in the victim meanwhile; a poll it accepted dies with it.
        with contextlib.suppress(httpx.TransportError):
            service.call("GET", path)
    victim = int(marker.read_text())
    assert queued or victim == started.json()["worker"]
    _wait_until_dead(victim)
    assert created(service, "fragile-customer") == 1  # applied, never committed
    if queued:
        # A live worker takes the run over by itself; a manual recovery is refused.
        refused = service.call("POST", f"{path}/recover")
        assert refused.status_code in (409,), refused.text
        done = service.wait_for_end(session, run)
        assert done["status"] == "done" and done["success"] is True, done
        assert done["worker"] != victim and done["takeovers"] == 1
    else:
        stranded = service.call("GET", path).json()
        assert (stranded["status"], stranded["worker"]) == ("running", victim)
        recovering = service.call("POST", f"{path}/recover")
        assert recovering.status_code == 202, recovering.text
        assert recovering.json()["worker"] != victim
        done = service.wait_for_end(session, run)
        assert done["status"] == "done" and done["success"] is True, done
        assert done["worker"] == recovering.json()["worker"]
    orders = httpx.get(
        f"{service.world.base_url}/orders", params={"customer": "fragile-customer"}
    ).json()["orders"]
    assert len(orders) == 1 and done["fields"]["order_id"] == orders[0]["order_id"]
    counts = service.world.counters["orders_create"]
    assert (counts.effects, counts.duplicates) == (1, 0)
    steps = service.call("GET", f"{path}/trace").json()["steps"]
    resumed = [n for s in steps for n in s["notes"] if n.startswith("resumed after")]
    assert resumed and resumed[0].endswith("ledger reconciled: place_order committed")
    again = service.call("POST", f"{path}/recover")
    assert again.status_code == 409 and again.json()["error"] == "not_running"


def created(service: Service, customer: str) -> int:
    reply = httpx.get(f"{service.world.base_url}/orders", params={"customer": customer})
    return len(reply.json()["orders"])


def test_several_workers_refuse_a_store_in_one_process_memory() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "closedloop", "serve", "--workers", "2", "--store", "memory://"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    output = done.stdout + done.stderr
    assert "memory://" in output and "2 workers need a store they share" in output
