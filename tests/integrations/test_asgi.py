"""ClosedLoopMiddleware on FastAPI apps: httpx's ASGI transport, and uvicorn on 127.0.0.1."""

from __future__ import annotations

import socket
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse, StreamingResponse

from closedloop import ConfigurationError
from closedloop.control import LatencyTracker, Strictness
from closedloop.integrations import (
    ClosedLoopMiddleware,
    ControlContext,
    ControlLoop,
    default_route_key,
)

from .conftest import FakeClock

HEADER_NAMES = [name for name, _ in ControlLoop().context("k").headers()]


def build_app(loop: ControlLoop, clock: FakeClock, **options: Any) -> FastAPI:
    app = FastAPI()
    app.add_middleware(ClosedLoopMiddleware, controller=loop, clock=clock, **options)
    app.state.seen = []

    @app.get("/weather/{city}")
    async def weather(city: str, request: Request) -> dict[str, Any]:
        ctx: ControlContext = request.state.closedloop
        app.state.seen.append(ctx)
        if city == "down":
            raise HTTPException(503, "upstream down")
        if city == "empty":
            return {"city": city}
        if city == "slow":
            clock.advance(3.0)
        return {"city": city, "temperature": 25}

    @app.get("/crash")
    async def crash() -> None:
        raise RuntimeError("handler bug")

    @app.get("/own-headers")
    async def own_headers() -> JSONResponse:
        return JSONResponse({"city": "x", "temperature": 1}, headers={"x-closedloop-rigour": "9"})

    @app.get("/stream")
    async def stream() -> StreamingResponse:
        async def parts() -> AsyncIterator[bytes]:
            yield b'{"city": "Oslo", '
            yield b'"temperature": 3}'

        return StreamingResponse(parts(), media_type="application/json")

    return app


@pytest.fixture
def loop() -> ControlLoop:
    return ControlLoop()


def client(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")


async def test_handler_and_client_get_the_same_settings(
    loop: ControlLoop, clock: FakeClock
) -> None:
    app = build_app(loop, clock)
    async with client(app) as c:
        response = await c.get("/weather/Paris")
    assert response.json() == {"city": "Paris", "temperature": 25}
    (ctx,) = app.state.seen
    assert ctx.key == "GET /weather/{city}"
    assert ctx.dynamic_timeout_s == LatencyTracker().dynamic_timeout()
    for name, value in ctx.headers():
        assert response.headers[name] == value
    assert [r.key for r in loop.history] == ["GET /weather/{city}"]


async def test_failures_on_a_route_raise_the_rigour_the_next_request_sees(
    loop: ControlLoop, clock: FakeClock
) -> None:
    app = build_app(loop, clock)
    async with client(app) as c:
        first = await c.get("/weather/down")
        second = await c.get("/weather/Paris")
        other = await c.get("/own-headers")
    assert first.status_code == 503
    assert float(first.headers["x-closedloop-rigour"]) == 0.0
    record = loop.history[0]
    assert record.error == 1.0 and dict(record.parts)["status"] == 1.0
    assert second.headers["x-closedloop-rigour"] == f"{record.settings.u:.3f}"
    assert second.headers["x-closedloop-strictness"] == "strict"
    assert int(second.headers["x-closedloop-timeout-ms"]) > int(
        first.headers["x-closedloop-timeout-ms"]
    )
    assert app.state.seen[1].strictness is Strictness.STRICT
    assert app.state.seen[1].last_error == 1.0
    # Another route keeps its own PID, and the app's own x-closedloop header is replaced.
    assert other.headers.get_list("x-closedloop-rigour") == ["0.000"]


async def test_one_pid_per_route_template_and_method(loop: ControlLoop, clock: FakeClock) -> None:
    app = build_app(loop, clock)
    async with client(app) as c:
        await c.get("/weather/a")
        await c.get("/weather/b")
        await c.post("/weather/a")
        await c.get("/no/such/page")
        await c.get("/no/other/page")
    assert [r.key for r in loop.history] == [
        "GET /weather/{city}",
        "GET /weather/{city}",
        "POST /weather/{city}",
        "GET <unmatched>",
        "GET <unmatched>",
    ]
    # 405 and 404 are the client's mistakes, not the route's.
    assert all(r.error == 0.0 for r in loop.history)


async def test_the_json_body_is_checked_for_key_fields(loop: ControlLoop, clock: FakeClock) -> None:
    app = build_app(loop, clock, key_fields=["city", "temperature"])
    async with client(app) as c:
        await c.get("/weather/Paris")
        await c.get("/weather/empty")
        await c.get("/stream")
        await c.head("/stream")
    good, empty, streamed, head = loop.history
    assert dict(good.parts) == {"status": 0.0, "latency": 0.0, "body": 0.0}
    assert dict(empty.parts)["body"] == 0.5 and empty.error == 0.5
    assert dict(streamed.parts)["body"] == 0.0  # assembled from two chunks
    assert "body" not in head.parts


async def test_latency_against_a_target_and_the_route_tracker(
    loop: ControlLoop, clock: FakeClock
) -> None:
    app = build_app(loop, clock, latency_target_s=2.0)
    async with client(app) as c:
        await c.get("/weather/slow")  # 3 s against 2 s: (3 − 2) / 2
        await c.get("/weather/fast")
    slow, fast = loop.history
    assert slow.latency_s == 3.0 and dict(slow.parts)["latency"] == pytest.approx(0.5)
    assert fast.latency_s == 0.0 and dict(fast.parts)["latency"] == 0.0

    trackers: list[LatencyTracker] = []

    def tracker() -> LatencyTracker:
        trackers.append(LatencyTracker(default_s=0.5, min_samples=1))
        return trackers[-1]

    loop2 = ControlLoop()
    app2 = build_app(loop2, clock, latency_tracker=tracker)
    async with client(app2) as c:
        await c.get("/weather/slow")  # target = dynamic timeout 2·0.5 = 1 s → (3 − 1) / 1
    assert dict(loop2.history[0].parts)["latency"] == 1.0
    assert trackers[0].samples == (3.0,)


async def test_an_exception_in_the_handler_counts_and_propagates(
    loop: ControlLoop, clock: FakeClock
) -> None:
    app = build_app(loop, clock)
    async with client(app) as c:
        with pytest.raises(RuntimeError, match="handler bug"):
            await c.get("/crash")
    (record,) = loop.history
    assert record.error == 1.0
    assert record.exception == "RuntimeError: handler bug"


async def test_large_bodies_are_not_checked_but_pass_intact(
    loop: ControlLoop, clock: FakeClock
) -> None:
    app = build_app(loop, clock, key_fields=["city"], max_body_bytes=10)
    async with client(app) as c:
        response = await c.get("/weather/Paris")
    assert response.json()["city"] == "Paris"
    (record,) = loop.history
    assert "body" not in record.parts
    assert record.note == "body over max_body_bytes=10; not checked"


async def test_responses_stream_through_chunk_by_chunk() -> None:
    """The app may send chunk n+1 only after the client has received chunk n."""
    received: list[bytes] = []
    lagging: list[int] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for i in range(5):
            if len(received) != i:
                lagging.append(i)
            await send({"type": "http.response.body", "body": b"x" * 10, "more_body": i < 4})

    async def send(message: Any) -> None:
        if message["type"] == "http.response.body":
            received.append(message["body"])

    async def receive() -> Any:
        return {"type": "http.request", "body": b"", "more_body": False}

    loop = ControlLoop()
    middleware = ClosedLoopMiddleware(app, controller=loop, key_fields=["a"], max_body_bytes=20)
    await middleware({"type": "http", "method": "GET", "path": "/s", "headers": []}, receive, send)
    assert received == [b"x" * 10] * 5
    assert lagging == []
    assert loop.history[0].key == "GET /s"


async def test_other_scopes_and_excluded_requests_pass_untouched() -> None:
    seen: list[Any] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(scope)
        if scope["type"] == "http":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b""})

    sent: list[Any] = []

    async def send(message: Any) -> None:
        sent.append(message)

    async def receive() -> Any:
        return {"type": "lifespan.startup"}

    loop = ControlLoop()
    middleware = ClosedLoopMiddleware(
        app, controller=loop, include=lambda scope: scope["path"] != "/health"
    )
    lifespan = {"type": "lifespan"}
    await middleware(lifespan, receive, send)
    await middleware({"type": "http", "method": "GET", "path": "/health"}, receive, send)
    assert seen[0] is lifespan and "state" not in seen[1]
    assert sent[0]["headers"] == []
    assert loop.history == ()


async def test_a_cancelled_request_is_not_measured() -> None:
    import asyncio

    async def app(scope: Any, receive: Any, send: Any) -> None:
        raise asyncio.CancelledError

    async def send(message: Any) -> None: ...

    async def receive() -> Any:
        return {}

    loop = ControlLoop()
    with pytest.raises(asyncio.CancelledError):
        await ClosedLoopMiddleware(app, controller=loop)(
            {"type": "http", "method": "GET", "path": "/"}, receive, send
        )
    assert loop.history == ()


def test_the_default_route_key_without_a_router() -> None:
    assert default_route_key({"method": "PUT", "path": "/x/1"}) == "PUT /x/1"


async def _noop(scope: Any, receive: Any, send: Any) -> None: ...


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"app": 42}, "app"),
        ({"controller": "x"}, "controller"),
        ({"controller": ControlLoop(), "tolerance": 0.2}, "tolerance"),
        ({"body_metric": len, "key_fields": ["a"]}, "body_metric"),
        ({"body_metric": "len"}, "body_metric"),
        ({"latency_target_s": 0.0}, "latency_target_s"),
        ({"max_body_bytes": -1}, "max_body_bytes"),
        ({"header_prefix": "x-é-"}, "header_prefix"),
        ({"state_key": ""}, "state_key"),
        ({"include": 1}, "include"),
        ({"gains": (0.0, 0.0, 0.0)}, "gains"),
    ],
)
def test_bad_configuration(kwargs: dict[str, Any], argument: str) -> None:
    options = {"app": _noop, **kwargs}
    app = options.pop("app")
    with pytest.raises(ConfigurationError) as info:
        ClosedLoopMiddleware(app, **options)
    assert info.value.argument == argument


async def test_a_route_key_must_be_a_string() -> None:
    middleware = ClosedLoopMiddleware(_noop, route_key=lambda scope: 42)  # type: ignore[arg-type,return-value]
    with pytest.raises(ConfigurationError) as info:
        await middleware({"type": "http", "method": "GET", "path": "/"}, _noop, _noop)  # type: ignore[arg-type]
    assert info.value.argument == "route_key"


async def test_a_status_metric_returning_nan_is_refused(
    loop: ControlLoop, clock: FakeClock
) -> None:
    app = build_app(loop, clock, status_metric=lambda status: float("nan"))
    async with client(app) as c:
        with pytest.raises(ConfigurationError) as info:
            await c.get("/weather/Paris")
    assert info.value.argument == "status_metric"


# --- a real server on 127.0.0.1 -------------------------------------------------------------


@pytest.fixture
def served() -> Iterator[tuple[str, ControlLoop]]:
    loop = ControlLoop()
    app = FastAPI()
    app.add_middleware(ClosedLoopMiddleware, controller=loop, key_fields=["city"])

    @app.get("/weather/{city}")
    async def weather(city: str, request: Request) -> dict[str, Any]:
        if city == "down":
            raise HTTPException(503)
        return {"city": city, "rigour": request.state.closedloop.rigour}

    @app.get("/stream")
    async def stream() -> StreamingResponse:
        async def lines() -> AsyncIterator[bytes]:
            for i in range(3):
                yield f"line {i}\n".encode()

        return StreamingResponse(lines(), media_type="text/plain")

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)  # listening before uvicorn starts: no waiting for it to come up
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}", loop
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


@pytest.mark.integration
def test_over_real_http(served: tuple[str, ControlLoop]) -> None:
    base, loop = served
    with httpx.Client(base_url=base, timeout=10) as http:
        assert http.get("/weather/down").status_code == 503
        answer = http.get("/weather/Oslo")
        with http.stream("GET", "/stream") as response:
            lines = list(response.iter_lines())
            headers = response.headers
    rigour = float(answer.headers["x-closedloop-rigour"])
    assert rigour > 0.5
    assert answer.json()["rigour"] == pytest.approx(rigour, abs=5e-4)
    assert lines == ["line 0", "line 1", "line 2"]
    assert all(name in headers for name in HEADER_NAMES)
    keys = [r.key for r in loop.history]
    assert keys == ["GET /weather/{city}", "GET /weather/{city}", "GET /stream"]
    assert loop.history[0].error == 1.0
    assert dict(loop.history[2].parts)["body"] == 1.0  # text/plain: no JSON with a city


async def test_latency_trackers_are_bounded_like_the_pids() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    async def send(message: Any) -> None: ...

    loop = ControlLoop(max_keys=2)
    middleware = ClosedLoopMiddleware(app, controller=loop)
    for path in ("/a", "/b", "/a", "/c"):
        await middleware({"type": "http", "method": "GET", "path": path}, _noop, send)  # type: ignore[arg-type]
    assert loop.keys == ("GET /a", "GET /c")
    assert len(middleware.latency("GET /a").samples) == 2
    assert middleware.latency("GET /b").samples == ()  # forgotten, then made anew
