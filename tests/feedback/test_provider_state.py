"""Provider limiter state, in memory and in a real Redis: permits, cooldown, breaker, budget,
and two workers (two Redis clients, two gates) sharing one limit."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from closedloop import CircuitOpenError
from closedloop.control import AIMDConfig, AIMDLimiter
from closedloop.execution import AdmissionGate
from closedloop.feedback import MemoryProviderState, RedisProviderState


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds
        await asyncio.sleep(0)


@pytest.fixture(params=["memory", "redis"])
async def state(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    rules = {"failure_threshold": 2, "recovery_s": 10.0, "budget_cap": 2.0, "budget_per_s": 0.5}
    if request.param == "memory":
        yield MemoryProviderState(**rules)
        return
    url = request.getfixturevalue("redis_url")
    shared = RedisProviderState(url, "provider-a", **rules)
    yield shared
    await shared.close()


async def test_permits_stop_at_the_limit_and_come_back(state: Any) -> None:
    assert (await state.acquire("a", 2, 0.0)).verdict == "ok"
    assert (await state.acquire("b", 2, 0.0)).value == 2
    assert (await state.acquire("c", 2, 0.0)).verdict == "full"
    await state.release("a", 1.0, "ok")
    assert (await state.acquire("c", 2, 1.0)).verdict == "ok"
    await state.publish_limit(1.0)  # a published limit beats the caller's fallback
    assert (await state.acquire("d", 5, 1.0)).verdict == "full"


async def test_a_lease_frees_the_permit_of_a_worker_that_died(state: Any) -> None:
    await state.acquire("dead", 1, 0.0)
    assert (await state.acquire("b", 1, 1.0)).verdict == "full"
    assert (await state.acquire("b", 1, 0.0 + state.rules.lease_s)).verdict == "ok"


async def test_retry_after_holds_every_caller_and_429s_are_counted(state: Any) -> None:
    await state.acquire("a", 5, 0.0)
    await state.release("a", 0.0, "rejected", retry_after_s=3.0)
    answer = await state.acquire("b", 5, 1.0)
    assert answer.verdict == "cooldown" and answer.value == pytest.approx(2.0)
    snap = await state.snapshot(1.0)
    assert snap.rejected == 1 and snap.cooldown_s == pytest.approx(2.0)
    assert snap.breaker == "closed"  # a 429 is not a breaker failure
    assert (await state.acquire("b", 5, 3.0)).verdict == "ok"


async def test_the_breaker_opens_probes_once_and_closes(state: Any) -> None:
    for holder in ("a", "b"):
        await state.acquire(holder, 5, 0.0)
        await state.release(holder, 0.0, "error")
    answer = await state.acquire("c", 5, 1.0)
    assert answer.verdict == "open" and answer.value == pytest.approx(9.0)
    assert (await state.snapshot(1.0)).times_opened == 1
    assert (await state.acquire("probe", 5, 10.0)).verdict == "ok"
    assert (await state.acquire("second", 5, 10.0)).verdict == "full"  # half-open: one probe
    await state.release("probe", 10.5, "ok")
    assert (await state.snapshot(10.5)).breaker == "closed"
    assert (await state.acquire("second", 5, 10.5)).verdict == "ok"


async def test_the_retry_budget_is_spent_and_refilled(state: Any) -> None:
    assert await state.budget(0.0, "take") and await state.budget(0.0, "take")
    assert not await state.budget(0.0, "take")
    await state.budget(2.0, "read")  # 2 s at 0.5 a second: one retry
    assert await state.budget(2.0, "take")
    assert (await state.snapshot(2.0)).retry_tokens == pytest.approx(0.0)


async def test_two_workers_on_redis_never_hold_more_than_the_shared_limit(redis_url: str) -> None:
    clock = _Clock()
    limit = 3
    workers = [RedisProviderState(redis_url, "shared") for _ in range(2)]
    gates = [
        AdmissionGate(
            AIMDLimiter(AIMDConfig(initial=limit, frozen=True)),
            state=w,
            clock=clock,
            sleep=clock.sleep,
        )
        for w in workers
    ]
    holding = peak = 0

    async def call(gate: AdmissionGate) -> None:
        nonlocal holding, peak
        async with gate.permit() as permit:
            holding += 1
            peak = max(peak, holding)
            for _ in range(3):  # hold the permit across a few turns of the loop
                await asyncio.sleep(0)
            holding -= 1
            permit.outcome("ok")

    await asyncio.gather(*(call(gates[i % 2]) for i in range(40)))
    assert peak == limit  # reached, never passed, with both workers' calls interleaved
    assert (await workers[0].snapshot(clock())).inflight == 0
    for w in workers:
        await w.close()


async def test_an_open_shared_breaker_refuses_through_the_gate() -> None:
    clock = _Clock()
    state = MemoryProviderState(failure_threshold=1)
    gate = AdmissionGate(AIMDLimiter(), state=state, clock=clock, sleep=clock.sleep)
    async with gate.permit() as permit:
        permit.outcome("timeout")
    with pytest.raises(CircuitOpenError, match="open"):
        async with gate.permit():
            pass
