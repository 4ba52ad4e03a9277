"""The real uvicorn server on 127.0.0.1 (thread and async variants), answering httpx."""

from __future__ import annotations

import asyncio
import socket

import httpx
import pytest

from closedloop import ConfigurationError
from closedloop_bench.world import World, WorldFaultKind, serve_world, serve_world_async
from closedloop_bench.world._server import bind_loopback

pytestmark = pytest.mark.integration


def test_serve_world_in_a_thread_answers_httpx() -> None:
    with serve_world("seed000", seed=0, latency_scale=0.0) as w:
        assert w.base_url.startswith("http://127.0.0.1:") and w.port > 0
        with httpx.Client(base_url=w.base_url, timeout=10) as c:
            health = c.get("/health").json()
            assert health["profile"] == "seed000" and health["seed"] == 0
            responses = [c.get("/weather", params={"city": "北京"}) for _ in range(60)]
            order = c.post(
                "/orders", json={"customer": "杨帆", "items": [{"sku": "SKU-1006", "quantity": 1}]}
            )
        failed = {
            r.headers["x-request-id"]: r.status_code for r in responses if r.status_code != 200
        }
        errors = {
            e.request_id: e.status for e in w.faults(endpoint="weather", kind=WorldFaultKind.ERROR)
        }
        assert failed == errors and failed  # the ground truth is exactly what the client saw
        assert len(w.faults(kind=WorldFaultKind.LATENCY)) >= 60
        counters = w.counters["orders_create"]
        assert counters.calls == 1 and counters.missing_idempotency_key == 1
        assert counters.effects == (1 if order.status_code == 201 else 0)
        w.reset()
        assert w.fault_log == () and w.counters["orders_create"].calls == 0
        assert "seed000" in repr(w)
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{w.base_url}/health", timeout=2)


def test_two_worlds_side_by_side_on_different_ports() -> None:
    with serve_world("none") as a, serve_world("harsh", seed=3, latency_scale=0.0) as b:
        assert a.port != b.port
        assert httpx.get(f"{a.base_url}/health").json()["profile"] == "none"
        assert httpx.get(f"{b.base_url}/health").json()["seed"] == 3
        assert b.data.seed == 3


def test_serve_a_given_world_and_stop_early() -> None:
    world = World(profile="none", latency_scale=0.0)
    with serve_world(world=world) as w:
        assert w.world is world
        assert httpx.get(f"{w.base_url}/cities").status_code == 200
        w.stop()
        w.stop()  # idempotent
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"{w.base_url}/cities", timeout=2)


async def test_serve_world_async_on_the_running_loop() -> None:
    async with serve_world_async("none", latency_scale=0.0) as w:
        c = httpx.AsyncClient(base_url=w.base_url, timeout=10)
        async with c:
            results = await asyncio.gather(
                *(c.get("/weather", params={"city": city}) for city in ("北京", "上海", "京"))
            )
            booking = await c.post(
                "/bookings",
                json={"flight_id": w.data.flights[0].flight_id, "passenger": "Alice Chen"},
                headers={"Idempotency-Key": "b1"},
            )
    assert [r.status_code for r in results] == [200, 200, 404]
    assert booking.status_code in (201, 409)
    assert len({r.headers["x-request-id"] for r in results}) == 3


async def test_async_server_latency_uses_the_injected_sleep() -> None:
    delays: list[float] = []

    async def sleep(seconds: float) -> None:
        delays.append(seconds)

    async with serve_world_async("seed000", latency_scale=1.0, sleep=sleep) as w:
        c = httpx.AsyncClient(base_url=w.base_url)
        async with c:
            for _ in range(5):
                await c.get("/cities")
    logged = [e.latency_s for e in w.faults(kind="latency")]
    assert delays == logged and all(0.2 <= d <= 0.8 for d in delays)


def test_port_in_use_is_a_configuration_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        with pytest.raises(ConfigurationError, match=f"port={port}"):
            bind_loopback(port)
    with pytest.raises(ConfigurationError, match="port"):
        bind_loopback(70000)


def test_listening_socket_is_tcp_with_nodelay() -> None:
    # Without both, asyncio leaves Nagle on for accepted connections and each answer
    # waits for a delayed ACK (~40 ms per request, measured).
    sock = bind_loopback(0)
    try:
        assert sock.proto == socket.IPPROTO_TCP
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    finally:
        sock.close()
