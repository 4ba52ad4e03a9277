"""Helpers shared by the world tests (fixtures in conftest.py hand them out)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import httpx

from closedloop_bench.world import World, WorldFaultProfile, create_world_app


class FakeClock:
    """Monotonic seconds that move only when told to."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class RecordingSleep:
    """An async sleep that records the delays instead of waiting."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


class MakeWorld(Protocol):
    def __call__(
        self, profile: str | Path | WorldFaultProfile = ..., **kwargs: object
    ) -> World: ...


Connect = Callable[[World], httpx.AsyncClient]


def connect(world: World) -> httpx.AsyncClient:
    """A client on a world's ASGI app (in process, no sockets); use ``async with``."""
    transport = httpx.ASGITransport(app=create_world_app(world))
    return httpx.AsyncClient(transport=transport, base_url="http://world")
