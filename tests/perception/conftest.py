"""Perception fixtures: a hand-driven clock and real HTTP servers on 127.0.0.1."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route


class FakeClock:
    """A clock that moves only when told to (for timestamps, ages and latencies)."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@dataclass
class LoopbackApp:
    """A real starlette app whose answers the test scripts, served by uvicorn."""

    base_url: str = ""
    calls: dict[str, int] = field(default_factory=dict)
    flaky_fail: bool = False
    release: asyncio.Event | None = None
    loop: asyncio.AbstractEventLoop | None = None


def _build_app(state: LoopbackApp) -> Starlette:
    def count(name: str) -> None:
        state.calls[name] = state.calls.get(name, 0) + 1

    async def weather(request: Request) -> Response:
        count("weather")
        city = request.path_params["city"]
        return JSONResponse({"city": city, "temperature": 25.5, "unit": request.query_params["u"]})

    async def flaky(request: Request) -> Response:
        count("flaky")
        if state.flaky_fail:
            return JSONResponse({"detail": "down"}, status_code=503, headers={"Retry-After": "7"})
        return JSONResponse({"city": "北京", "temperature": 21.0})

    async def limited(request: Request) -> Response:
        count("limited")
        return JSONResponse({"detail": "slow down"}, status_code=429, headers={"Retry-After": "3"})

    async def empty(request: Request) -> Response:
        count("empty")
        return JSONResponse({"rooms": []})

    async def html(request: Request) -> Response:
        count("html")
        return Response("<html><body>Login to Wi-Fi</body></html>", media_type="text/html")

    async def hang(request: Request) -> Response:
        count("hang")
        state.loop = asyncio.get_running_loop()
        if state.release is None:
            state.release = asyncio.Event()
        await state.release.wait()  # released at teardown; the client gives up long before
        return JSONResponse({})

    return Starlette(
        routes=[
            Route("/weather/{city}", weather),
            Route("/flaky", flaky),
            Route("/limited", limited),
            Route("/empty", empty),
            Route("/html", html),
            Route("/hang", hang),
        ]
    )


def _listening_socket() -> socket.socket:
    # Bound and listening before uvicorn starts: connections queue in the backlog, so
    # no test has to wait for the server to come up.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    return sock


@pytest.fixture(scope="module")
def loopback_app() -> Iterator[LoopbackApp]:
    state = LoopbackApp()
    sock = _listening_socket()
    port = sock.getsockname()[1]
    state.base_url = f"http://127.0.0.1:{port}"
    config = uvicorn.Config(
        _build_app(state), log_level="warning", lifespan="off", timeout_graceful_shutdown=1
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        if state.loop is not None and state.release is not None:
            state.loop.call_soon_threadsafe(state.release.set)
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


@pytest.fixture
async def raw_server() -> AsyncIterator[Callable[[bytes], Awaitable[str]]]:
    """A plain asyncio TCP server on 127.0.0.1 that writes exact bytes, then closes.

    Used for what a well-behaved framework refuses to send: a body shorter than its
    Content-Length, a lying content type.
    """
    servers: list[asyncio.base_events.Server] = []

    async def start(reply: bytes) -> str:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(reply)
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        servers.append(server)
        port = server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    yield start
    for server in servers:
        server.close()
        await server.wait_closed()
