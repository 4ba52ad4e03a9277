"""Service fixtures: test agents on deterministic models, apps on real SQLite, keys, servers."""

from __future__ import annotations

import asyncio
import re
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI

from closedloop import Runtime
from closedloop.agent import Agent, ControlConfig, RunLimits, stop_on_no_progress, stop_on_repeats
from closedloop.feedback import SQLiteStore, StateStore
from closedloop.models import CallInfo, FunctionModel, Message
from closedloop.perception import Observation
from closedloop.server import AgentContext, AgentRegistry, ApiKeys, ServerSettings, create_app
from closedloop.server._deps import Service

# --- test agents ---------------------------------------------------------------------------


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def calc_reply(messages: tuple[Message, ...], info: CallInfo) -> dict[str, Any]:
    """Adds the two numbers of "Add A and B", then answers with the tool's value."""
    text = messages[-1].content
    seen = re.search(r"^value: (-?\d+)$", text, re.MULTILINE)
    if seen:
        return {"final": seen.group(1)}
    match = re.search(r"Add (-?\d+) and (-?\d+)", text)
    assert match is not None, text
    return {"tool": "add", "arguments": {"a": int(match.group(1)), "b": int(match.group(2))}}


# The sensor agent's readings lose confidence step by step, so the ESO's f_est climbs
# through every protocol level until the task is handed to a person (7 steps).
CONFIDENCE = (0.95, 0.9, 0.8, 0.6, 0.4, 0.2, 0.1, 0.05)
SENSOR_CONTROL = ControlConfig(
    eso_min_samples=3, protocol_thresholds=(0.2, 0.35, 0.5), hysteresis=0.0, protocol_dwell=1
)


def probe(sample: int) -> Observation:
    """Read one sample of the sensor."""
    confidence = CONFIDENCE[min(max(sample, 0), len(CONFIDENCE) - 1)]
    return Observation.ok(
        {"sample": sample, "reading": 10 + sample}, source="probe", confidence=confidence
    )


def sensor_reply(messages: tuple[Message, ...], info: CallInfo) -> dict[str, Any]:
    match = re.search(r"step (\d+) of", messages[-1].content)
    assert match is not None
    step = int(match.group(1))
    if step <= 8:
        return {"tool": "probe", "arguments": {"sample": step - 1}}
    return {"final": "eight samples read"}


def sensor_agent(ctx: AgentContext) -> Agent:
    return Agent(
        ctx.model,
        [probe],
        control=SENSOR_CONTROL,
        limits=RunLimits(max_steps=12, stop=stop_on_no_progress(20) | stop_on_repeats(2)),
        runtime=Runtime(store=ctx.store),
    )


def calc_agent(ctx: AgentContext) -> Agent:
    return Agent(ctx.model, [add], runtime=Runtime(store=ctx.store))


class RoutingModel(FunctionModel):
    """One model for every test agent: the system prompt says which tools it has."""

    def __init__(self, delay_s: float = 0.0) -> None:
        async def reply(messages: tuple[Message, ...], info: CallInfo) -> dict[str, Any]:
            if delay_s:
                await asyncio.sleep(delay_s)  # the model's latency, inside the server
            if "- probe:" in messages[0].content:
                return sensor_reply(messages, info)
            return calc_reply(messages, info)

        super().__init__(reply, name="test-router")


def make_registry() -> AgentRegistry:
    registry = AgentRegistry()
    registry.register("calc", calc_agent, description="adds two numbers")
    registry.register("sensor", sensor_agent, description="reads a failing sensor")
    return registry


# --- apps and clients ----------------------------------------------------------------------


@dataclass
class ManualClock:
    """Monotonic time that moves only when told to (the rate limiter's clock)."""

    now: float = 100.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class Harness:
    """An app on a real SQLite file, two keys, and a client per key."""

    app: FastAPI
    store: StateStore
    clock: ManualClock
    keys: dict[str, str] = field(default_factory=dict)
    clients: dict[str, httpx.AsyncClient] = field(default_factory=dict)

    @property
    def service(self) -> Service:
        service: Service = self.app.state.service
        return service

    async def settle(self) -> None:
        """Wait for every run executing in the app (no sleeping: the tasks are awaited)."""
        await self.service.runs.wait_idle()

    def client(self, who: str) -> httpx.AsyncClient:
        return self.clients[who]


def build_settings(
    store: StateStore, tmp_path: Path, clock: ManualClock, **overrides: Any
) -> ServerSettings:
    options: dict[str, Any] = {
        "store": store,
        "model": RoutingModel(),
        "registry": make_registry(),
        "runs_dir": tmp_path / "runs",
        "gc_interval_s": None,
        "clock": clock,
        "sse_poll_s": 0.05,
    }
    options.update(overrides)
    return ServerSettings(**options)


HarnessFactory = Callable[..., Any]


@pytest.fixture
async def make_harness(tmp_path: Path) -> AsyncIterator[HarnessFactory]:
    """Build harnesses (each with its own app); everything is closed at the end."""
    stack: list[tuple[Harness, Any]] = []
    stores: list[SQLiteStore] = []

    async def factory(**overrides: Any) -> Harness:
        store = SQLiteStore(tmp_path / f"state-{len(stores)}.db")
        stores.append(store)
        clock = ManualClock()
        app = create_app(build_settings(store, tmp_path, clock, **overrides))
        harness = Harness(app=app, store=store, clock=clock)
        lifespan = app.router.lifespan_context(app)
        await lifespan.__aenter__()
        stack.append((harness, lifespan))
        keys = ApiKeys(store)
        for who in ("alice", "bob"):
            token = (await keys.create(who)).token
            harness.keys[who] = token
            harness.clients[who] = httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app),
                base_url="http://service.test",
                headers={"Authorization": f"Bearer {token}"},
            )
        harness.clients["anonymous"] = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://service.test"
        )
        return harness

    yield factory
    for harness, lifespan in reversed(stack):
        await harness.settle()
        for client in harness.clients.values():
            await client.aclose()
        await lifespan.__aexit__(None, None, None)
    for store in stores:
        await store.close()


@pytest.fixture
async def harness(make_harness: HarnessFactory) -> Harness:
    built: Harness = await make_harness()
    return built


async def new_session(client: httpx.AsyncClient, **body: Any) -> str:
    response = await client.post("/v1/sessions", json=body)
    assert response.status_code == 201, response.text
    session_id: str = response.json()["id"]
    return session_id


async def start_run(client: httpx.AsyncClient, session_id: str, agent: str, task: str) -> str:
    response = await client.post(
        f"/v1/sessions/{session_id}/runs", json={"agent": agent, "task": task}
    )
    assert response.status_code == 202, response.text
    run_id: str = response.json()["id"]
    return run_id


# --- a real server on 127.0.0.1 ------------------------------------------------------------


@dataclass
class LiveServer:
    base_url: str
    app: FastAPI
    thread: threading.Thread
    server: uvicorn.Server


def serve_in_thread(app: FastAPI) -> LiveServer:
    """uvicorn on a free loopback port, in a daemon thread; returns once it answers."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=2, lifespan="on")
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    base_url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the test server did not start")
        thread.join(timeout=0.05)
    return LiveServer(base_url=base_url, app=app, thread=thread, server=server)


def stop_server(live: LiveServer) -> None:
    live.server.should_exit = True
    live.thread.join(timeout=15)


@pytest.fixture
def live_server_factory() -> Iterator[Callable[[FastAPI], LiveServer]]:
    servers: list[LiveServer] = []

    def factory(app: FastAPI) -> LiveServer:
        live = serve_in_thread(app)
        servers.append(live)
        return live

    yield factory
    for live in servers:
        stop_server(live)
