"""Reference fixtures: one real world server (uvicorn in a thread, loopback, no latency)
shared by the area, reset before every test, and worlds with custom fault profiles."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

import pytest

from closedloop.feedback import MemoryStore
from closedloop_bench.reference import WorldTools
from closedloop_bench.world import EndpointFaults, WorldFaultProfile, WorldHandle, serve_world

ServeFaults = Callable[[dict[str, EndpointFaults]], AbstractContextManager[WorldHandle]]


@pytest.fixture(scope="session")
def _server() -> Iterator[WorldHandle]:
    with serve_world("none", latency_scale=0.0) as handle:
        yield handle


@pytest.fixture
def world(_server: WorldHandle) -> WorldHandle:
    """The shared world, fresh (state, counters, logs) for this test."""
    _server.reset()
    return _server


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore()


@pytest.fixture
async def tools(world: WorldHandle, store: MemoryStore) -> AsyncIterator[WorldTools]:
    """Tools on the shared world whose effects take their keys from ``store``'s ledger."""
    async with WorldTools(world.base_url, store=store) as kit:
        yield kit


@pytest.fixture
def serve_faults() -> ServeFaults:
    """``with serve_faults({"payments_create": EndpointFaults(...)}) as world:``."""

    def serve(endpoints: dict[str, EndpointFaults], **kwargs: Any) -> Any:
        profile = WorldFaultProfile(name="test", endpoints=endpoints)
        return serve_world(profile, latency_scale=0.0, **kwargs)

    return serve
