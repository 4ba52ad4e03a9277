"""Bench fixtures: an isolated $CLOSEDLOOP_HOME, a sleep that never waits, tiny configs."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from closedloop_bench.benchmarks import FaultsConfig
from closedloop_bench.world import EndpointFaults, Outage, WorldFaultProfile


class FakeSleep:
    """Records every backoff and returns at once (nothing waits for real).

    A sleep of a minute or more is a deadline watcher (the loop races its calls against
    ``sleep(deadline)``): it never ends, as no deadline falls inside a test.
    """

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        if seconds >= 60.0:
            await asyncio.Event().wait()
        self.delays.append(seconds)


@pytest.fixture(autouse=True)
def _home(closedloop_home: Path) -> Iterator[Path]:
    yield closedloop_home


@pytest.fixture
def sleep() -> FakeSleep:
    return FakeSleep()


def first_requests_fail(folder: Path, *endpoints: str, count: int = 1) -> str:
    """A profile file whose first ``count`` requests to each endpoint are outages (503)."""
    outage = EndpointFaults(outages=(Outage(unit="requests", start=0, end=count),))
    profile = WorldFaultProfile(name="first-fails", endpoints={e: outage for e in endpoints})
    path = folder / f"first-{count}-fail.json"
    path.write_text(profile.model_dump_json())
    return str(path)


def tiny(**overrides: object) -> FaultsConfig:
    """A few episodes on a world with no latency; every sleep injected by the test."""
    options: dict[str, object] = {
        "model": "test:oracle",
        "profiles": ("none",),
        "steps": (1, 2),
        "episodes": 2,
        "latency_scale": 0.0,
        "backoff_s": 0.0,
        "cache": False,
        "concurrency": 4,
        # A loaded test machine must not turn into timeouts: the tools' adaptive timeout
        # falls to 50 ms when the world answers in microseconds.
        "tool_timeout_s": 30.0,
    }
    options.update(overrides)
    return FaultsConfig(**options)  # type: ignore[arg-type]
