"""World fixtures: worlds that never sleep, clients on the ASGI app, a hand-driven clock."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from closedloop_bench.world import World, WorldFaultProfile

from ._support import Connect, FakeClock, MakeWorld, RecordingSleep, connect


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def sleeps() -> RecordingSleep:
    return RecordingSleep()


@pytest.fixture
def make_world(clock: FakeClock, sleeps: RecordingSleep) -> MakeWorld:
    """World(...) with the fake clock, recording sleep and latency_scale=0 unless told."""

    def make(profile: str | Path | WorldFaultProfile = "none", **kwargs: object) -> World:
        kwargs.setdefault("latency_scale", 0.0)
        kwargs.setdefault("clock", clock)
        kwargs.setdefault("sleep", sleeps)
        return World(profile=profile, **kwargs)  # type: ignore[arg-type]

    return make


@pytest.fixture
def world(make_world: MakeWorld) -> World:
    return make_world("none")


@pytest.fixture(name="connect")
def connect_fixture() -> Connect:
    """Open a client on a world's ASGI app: ``async with connect(world) as c``."""
    return connect


@pytest.fixture
async def client(world: World) -> AsyncIterator[httpx.AsyncClient]:
    async with connect(world) as c:
        yield c
