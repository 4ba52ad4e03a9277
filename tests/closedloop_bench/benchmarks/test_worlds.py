"""The world farm: one loopback server, a world per lease, reset with the lease's seed."""

from __future__ import annotations

import httpx
import pytest

from closedloop import ConfigurationError
from closedloop_bench.benchmarks import WorldFarm


async def test_leases_get_worlds_of_their_own() -> None:
    async with WorldFarm("seed000", size=2, latency_scale=0.0) as farm:
        async with farm.lease(1) as a, farm.lease(2) as b, httpx.AsyncClient() as client:
            assert a.world is not b.world and a.base_url != b.base_url
            assert a.base_url.startswith("http://127.0.0.1:")
            for _ in range(3):
                await client.get(f"{a.base_url}/weather", params={"city": "北京"})
            assert a.world.request_counts() == {"weather": 3}
            assert b.world.request_counts() == {}
            assert (a.world.fault_seed, b.world.fault_seed) == (1, 2)
            missing = await client.get(f"{farm.base_url}/nowhere/weather")
            assert missing.status_code == 404
        async with farm.lease(5) as again:  # a returned world comes back fresh
            assert again.world.request_counts() == {} and again.world.fault_seed == 5


async def test_a_farm_must_be_entered_before_leasing() -> None:
    farm = WorldFarm("none", size=1)
    with pytest.raises(ConfigurationError, match="farm"):
        async with farm.lease(0):
            pass
