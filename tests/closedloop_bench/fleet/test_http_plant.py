"""The library's real HTTP model client, with its limiters, against the fleet plant served on
loopback HTTP: Retry-After honoured, and the limit lowered before the first 429."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator

import pytest

from closedloop import ModelError
from closedloop.control import Cooldown, DelayPIDConfig, DelayPIDLimiter
from closedloop.execution import AdmissionGate
from closedloop.models import GatedModel, OpenAICompatible
from closedloop_bench.fleet import Capacity, ProviderConfig, Schedule
from closedloop_bench.fleet._http import PlantEndpoint, ServedPlant, serve_plant

pytestmark = [pytest.mark.real_model, pytest.mark.integration]


@pytest.fixture
def served() -> Iterator[list[ServedPlant]]:
    plants: list[ServedPlant] = []
    yield plants
    for plant in plants:
        plant.stop()


def _start(plants: list[ServedPlant], endpoint: PlantEndpoint) -> ServedPlant:
    plant = serve_plant(endpoint)
    plants.append(plant)
    return plant


async def test_429s_are_answered_with_retry_after_and_honoured(served: list[ServedPlant]) -> None:
    # Two requests' worth of bucket: the third of three at once is refused.
    config = ProviderConfig(servers=4, rpm=60.0, bucket_s=2.0)
    steady = Schedule("steady", 600.0, lambda t: Capacity())
    plant = _start(served, PlantEndpoint(config, steady, time_scale=10.0))
    gate = AdmissionGate(
        DelayPIDLimiter(start=time.monotonic()), cooldown=Cooldown(), clock=time.monotonic
    )
    model = GatedModel(OpenAICompatible(plant.base_url, "fleet", timeout=10.0), gate)
    answers = await asyncio.gather(*(model.complete("hello") for _ in range(3)))
    assert [a.text for a in answers] == ["done"] * 3
    log = plant.endpoint.log
    refused = [t for t, status in log if status == 429]
    assert gate.rejected == len(refused) >= 1 and model.retries == len(refused)
    # The retry waited for the bucket: nothing arrived between the 429 and its Retry-After
    # (1 s of plant time, a tenth of a second here).
    first = refused[0]
    assert not [t for t, _ in log if first < t < first + 1.0 - 0.05]
    await model.aclose()


SCALE = 4.0


def _brownout_then_cut(t: float) -> Capacity:
    """Servers slow from 5 s to 15 s (plant time); the buckets are cut to 5 % at 20 s."""
    speed = 1.0 if t < 5.0 else max(0.3, 1.0 - 0.7 * (t - 5.0) / 10.0)
    return Capacity(1.0, speed, 0.05 if t >= 20.0 else 1.0)


async def test_the_limit_falls_before_the_first_429_under_a_brownout(
    served: list[ServedPlant],
) -> None:
    config = ProviderConfig(servers=2, queue_limit=64, rpm=300.0)
    schedule = Schedule("brownout, then a cut", 30.0, _brownout_then_cut)
    # Plant time runs SCALE times the wall clock: slow enough that the brownout stands out
    # above a loaded machine's scheduling delays (at 10x they drowned it and the limit did
    # not fall before the cut). The limiter's window is two seconds of plant time.
    endpoint = PlantEndpoint(config, schedule, time_scale=SCALE)
    plant = _start(served, endpoint)
    initial = 20.0
    window_s = 2.0 / SCALE
    limiter = DelayPIDLimiter(
        DelayPIDConfig(initial=initial, window_s=window_s), start=time.monotonic()
    )
    gate = AdmissionGate(limiter, cooldown=Cooldown(), clock=time.monotonic)
    model = GatedModel(OpenAICompatible(plant.base_url, "fleet", timeout=5.0), gate, max_attempts=1)
    limits: list[tuple[float, float]] = []

    async def client() -> None:
        while endpoint.now() < 24.0:
            with contextlib.suppress(ModelError):  # a refusal ends the call; the client goes on
                await model.complete("work")
            limits.append((endpoint.now(), limiter.limit))

    await asyncio.gather(*(client() for _ in range(8)))
    await model.aclose()
    first_429 = min(t for t, status in endpoint.log if status == 429)
    lowered = [t for t, limit in limits if limit < initial]
    assert first_429 >= 20.0  # only the cut refuses: the brownout itself sends no 429
    assert lowered and min(lowered) < first_429
    assert min(limit for t, limit in limits if t < first_429) < initial - 1.0
