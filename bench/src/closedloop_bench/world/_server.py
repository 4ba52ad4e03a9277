"""Serve a world with uvicorn on 127.0.0.1: in a thread (sync) or in the running loop (async).

The socket is bound here, on port 0 unless one is asked for, before uvicorn starts, so
the port is known and no other process can take it in between.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import uvicorn

from closedloop._exceptions import ConfigurationError
from closedloop._validation import require_int_at_least, require_positive

from ._app import create_world_app
from ._data import DEFAULT_SEED, WorldData
from ._faults import WorldFaultProfile
from ._injector import WorldFaultEvent, WorldFaultKind
from ._schemas import EffectCounters, WorldEffectRecord
from ._world import World

__all__ = ["WorldHandle", "bind_loopback", "run_world", "serve_world", "serve_world_async"]

HOST = "127.0.0.1"
_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def bind_loopback(port: int = 0) -> socket.socket:
    """A listening TCP socket on 127.0.0.1 (``port`` 0: a free one)."""
    require_int_at_least("port", port, 0)
    if port > 65535:
        raise ConfigurationError("port", port, "must be <= 65535")
    # proto must be IPPROTO_TCP, not 0: asyncio only sets TCP_NODELAY on accepted
    # connections whose proto says TCP, and without it Nagle meets delayed ACKs and
    # every answer waits ~40 ms. The listener's own NODELAY is inherited on Linux.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((HOST, port))
    except OSError as exc:
        sock.close()
        raise ConfigurationError("port", port, f"cannot listen on {HOST}:{port}: {exc}") from None
    sock.listen(128)
    return sock


class _Server(uvicorn.Server):
    """uvicorn that says when it is listening; signals stay with the host unless asked."""

    def __init__(
        self, config: uvicorn.Config, on_started: Callable[[], None], *, signals: bool = False
    ) -> None:
        super().__init__(config)
        self._on_started = on_started
        self._signals = signals

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # Inside tests and benchmarks, Ctrl-C belongs to them, not to the world. Standalone,
        # SIGINT/SIGTERM stop the server and the command ends normally (uvicorn's own
        # version re-raises the signal afterwards, which would end it with a traceback).
        if not self._signals or threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in _SIGNALS}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        self._on_started()


def _config(world: World) -> uvicorn.Config:
    return uvicorn.Config(
        create_world_app(world),
        lifespan="off",
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=2,
    )


class WorldHandle:
    """A running world: its URL and its ground truth (fault log, counters, effects).

    ``world`` is the ``World`` itself (data for checkers, state for assertions).
    """

    def __init__(self, world: World, port: int, stop: Callable[[], None]) -> None:
        self.world = world
        self.port = port
        self.base_url = f"http://{HOST}:{port}"
        self._stop = stop

    @property
    def data(self) -> WorldData:
        return self.world.data

    @property
    def fault_log(self) -> tuple[WorldFaultEvent, ...]:
        """Every injected fault since start or the last reset."""
        return self.world.fault_log()

    def faults(
        self, endpoint: str | None = None, kind: WorldFaultKind | str | None = None
    ) -> tuple[WorldFaultEvent, ...]:
        """The fault log filtered by endpoint and/or kind."""
        return self.world.fault_log(endpoint, kind)

    @property
    def counters(self) -> dict[str, EffectCounters]:
        """Per effect/compensation endpoint: calls, effects, duplicates, replays, ..."""
        return self.world.counters()

    @property
    def effects(self) -> tuple[WorldEffectRecord, ...]:
        return self.world.effects()

    def reset(self, *, fault_seed: int | None = None) -> None:
        """New episode (see ``World.reset``)."""
        self.world.reset(fault_seed=fault_seed)

    def stop(self) -> None:
        """Stop serving (idempotent)."""
        self._stop()

    def __repr__(self) -> str:
        return f"WorldHandle({self.base_url!r}, profile={self.world.profile.name!r})"


def _world(
    world: World | None,
    seed: int,
    profile: str | Path | WorldFaultProfile,
    latency_scale: float,
    fault_seed: int | None,
) -> World:
    if world is not None:
        return world
    return World(seed=seed, profile=profile, latency_scale=latency_scale, fault_seed=fault_seed)


@contextlib.contextmanager
def serve_world(
    profile: str | Path | WorldFaultProfile = "none",
    seed: int = DEFAULT_SEED,
    *,
    latency_scale: float = 1.0,
    fault_seed: int | None = None,
    port: int = 0,
    world: World | None = None,
    start_timeout_s: float = 30.0,
) -> Iterator[WorldHandle]:
    """Serve a world from a background thread for the ``with`` block.

    >>> with serve_world("seed000", seed=0, latency_scale=0.0) as w:  # doctest: +SKIP
    ...     httpx.get(f"{w.base_url}/weather", params={"city": "北京"})
    """
    require_positive("start_timeout_s", start_timeout_s)
    the_world = _world(world, seed, profile, latency_scale, fault_seed)
    sock = bind_loopback(port)
    started = threading.Event()
    server = _Server(_config(the_world), started.set)
    failure: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(server.serve(sockets=[sock]))
        except BaseException as exc:  # reported to the caller below
            failure.append(exc)
            started.set()

    thread = threading.Thread(target=run, name="closedloop-world", daemon=True)
    thread.start()

    def stop() -> None:
        server.should_exit = True
        if thread.is_alive() and thread is not threading.current_thread():
            thread.join(timeout=10.0)

    try:
        if not started.wait(start_timeout_s) or failure or not server.started:
            stop()
            raise ConfigurationError(
                "world", the_world.profile.name, f"the server did not start: {failure[:1]}"
            )
        yield WorldHandle(the_world, sock.getsockname()[1], stop)
    finally:
        stop()
        sock.close()


@contextlib.asynccontextmanager
async def serve_world_async(
    profile: str | Path | WorldFaultProfile = "none",
    seed: int = DEFAULT_SEED,
    *,
    latency_scale: float = 1.0,
    fault_seed: int | None = None,
    port: int = 0,
    world: World | None = None,
    sleep: Callable[[float], Awaitable[None]] | None = None,
) -> AsyncIterator[WorldHandle]:
    """Serve a world on the running event loop for the ``async with`` block.

    Injected latency sleeps on this loop (with ``sleep`` if given), so a test can drive
    both the server and its client from one loop.
    """
    the_world = world
    if the_world is None:
        the_world = World(
            seed=seed,
            profile=profile,
            latency_scale=latency_scale,
            fault_seed=fault_seed,
            sleep=sleep if sleep is not None else asyncio.sleep,
        )
    sock = bind_loopback(port)
    started = asyncio.Event()
    server = _Server(_config(the_world), started.set)
    task = asyncio.create_task(server.serve(sockets=[sock]), name="closedloop-world")

    def stop() -> None:
        server.should_exit = True

    try:
        waiter = asyncio.create_task(started.wait())
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        if not started.is_set():
            waiter.cancel()
            exc = task.exception() if task.done() else None
            raise ConfigurationError("world", the_world.profile.name, f"did not start: {exc}")
        yield WorldHandle(the_world, sock.getsockname()[1], stop)
    finally:
        stop()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        sock.close()


def run_world(
    world: World,
    *,
    port: int = 0,
    on_started: Callable[[WorldHandle], None] | None = None,
) -> None:
    """Serve ``world`` in the foreground until SIGINT/SIGTERM (``closedloop world serve``).

    ``on_started`` receives the handle once the socket is listening.
    """
    sock = bind_loopback(port)

    def stop() -> None:
        server.should_exit = True

    def started() -> None:
        if on_started is not None:
            on_started(WorldHandle(world, sock.getsockname()[1], stop))

    server = _Server(_config(world), started, signals=True)
    try:
        asyncio.run(server.serve(sockets=[sock]))
    finally:
        sock.close()
