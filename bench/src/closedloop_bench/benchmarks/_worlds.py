"""Many worlds behind one loopback server: one fresh world per concurrent episode.

Faults are drawn per (fault seed, endpoint, request index), so an episode is reproducible
only if it has its endpoints' request counters to itself. A :class:`WorldFarm` serves a
pool of ``World`` objects from one uvicorn server on 127.0.0.1 under path prefixes
(``/w3/weather`` is ``/weather`` of world 3); an episode leases one, reset with its
fault seed, and gives it back when it ends. The server runs on the caller's event loop,
so the worlds' injected latencies are asyncio sleeps beside the agents' own work.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import uvicorn

from closedloop._exceptions import ConfigurationError
from closedloop._validation import require_int_at_least, require_non_negative

from ..world import World, WorldFaultProfile, create_world_app, load_profile, load_world

__all__ = ["WorldFarm", "WorldLease"]

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


def _loopback_socket() -> socket.socket:
    # IPPROTO_TCP so asyncio sets TCP_NODELAY on accepted connections (no Nagle stalls).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(512)
    return sock


class _Dispatcher:
    """ASGI: ``/w{n}/rest`` goes to world ``n``'s app as ``/rest``."""

    def __init__(self) -> None:
        self.apps: dict[str, Any] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        path = str(scope.get("path", "/"))
        prefix, _, rest = path.lstrip("/").partition("/")
        app = self.apps.get(prefix)
        if app is None:
            await send({"type": "http.response.start", "status": 404, "headers": []})
            await send({"type": "http.response.body", "body": b"no such world"})
            return
        child = dict(scope)
        child["path"] = "/" + rest
        child["raw_path"] = child["path"].encode("utf-8")
        await app(child, receive, send)


class WorldLease:
    """One leased world: its URL and the ``World`` (ground truth after the episode)."""

    def __init__(self, world: World, base_url: str) -> None:
        self.world = world
        self.base_url = base_url


class WorldFarm:
    """A pool of ``size`` worlds of one profile and data seed, served on 127.0.0.1.

    ``async with WorldFarm("seed000", size=16) as farm: async with farm.lease(seed) as w:``.
    ``latency_scale`` multiplies every injected delay; ``sleep`` performs them (inject a
    fake one in tests). Leases wait while every world is in use.
    """

    def __init__(
        self,
        profile: str | Path | WorldFaultProfile = "seed000",
        *,
        seed: int = 0,
        size: int = 8,
        latency_scale: float = 1.0,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.profile = load_profile(profile)
        self.seed = require_int_at_least("seed", seed, 0)
        self.size = require_int_at_least("size", size, 1)
        self.latency_scale = require_non_negative("latency_scale", latency_scale)
        self._sleep = sleep
        self._dispatcher = _Dispatcher()
        self._free: asyncio.Queue[tuple[str, World]] = asyncio.Queue()
        self._server: uvicorn.Server | None = None
        self._task: asyncio.Task[None] | None = None
        self._sock: socket.socket | None = None
        self.base_url = ""

    async def __aenter__(self) -> WorldFarm:
        data = load_world(self.seed)
        for n in range(self.size):
            world = World(
                data=data,
                profile=self.profile,
                latency_scale=self.latency_scale,
                sleep=self._sleep,
            )
            name = f"w{n}"
            self._dispatcher.apps[name] = create_world_app(world)
            self._free.put_nowait((name, world))
        self._sock = _loopback_socket()
        config = uvicorn.Config(
            self._dispatcher,
            lifespan="off",
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=2,
            limit_concurrency=None,
            backlog=512,
        )
        server = uvicorn.Server(config)
        self._server = server
        self._task = asyncio.create_task(server.serve(sockets=[self._sock]), name="world-farm")
        for _ in range(2000):  # ~10 s: uvicorn starts in milliseconds on loopback
            if server.started or self._task.done():
                break
            await asyncio.sleep(0.005)
        if not server.started:
            await self.__aexit__(None, None, None)
            raise ConfigurationError("world", self.profile.name, "the world server did not start")
        self.base_url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._sock is not None:
            self._sock.close()
        self._server = self._task = self._sock = None

    @contextlib.asynccontextmanager
    async def lease(self, fault_seed: int) -> AsyncIterator[WorldLease]:
        """A world to itself for one episode, reset with ``fault_seed``."""
        if self._server is None:
            raise ConfigurationError("farm", self, "use it inside 'async with'")
        name, world = await self._free.get()
        try:
            world.reset(fault_seed=fault_seed)
            yield WorldLease(world, f"{self.base_url}/{name}")
        finally:
            self._free.put_nowait((name, world))
