"""Adversarial fixtures: a hostile-reply rig on a real SQLite file, a loopback tool server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from closedloop_bench.benchmarks._adversarial_input import LoopbackServer, ModelRig, ToolRig


@pytest.fixture
async def model_rig(tmp_path: Path) -> AsyncIterator[ModelRig]:
    rig = ModelRig(tmp_path)
    yield rig
    await rig.close()


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """A private event loop for Hypothesis-driven sync tests that run async cases."""
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


@pytest.fixture(scope="module")
def tool_server() -> Iterator[tuple[ToolRig, str]]:
    rig = ToolRig()
    with LoopbackServer(rig.app) as server:
        yield rig, server.url
    rig.close()
