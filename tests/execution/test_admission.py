"""The permit gate: a limit held, Retry-After waited out, throttling refused locally."""

from __future__ import annotations

import asyncio

import pytest

from closedloop.control import AIMDConfig, AIMDLimiter, ClientThrottle, Cooldown
from closedloop.execution import AdmissionGate, Throttled


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)


def test_gate_never_exceeds_the_limit_and_records_latency() -> None:
    clock = _Clock()
    limiter = AIMDLimiter(AIMDConfig(initial=2, min_limit=1))
    gate = AdmissionGate(limiter, clock=clock, sleep=clock.sleep)
    peak = 0

    async def call() -> None:
        nonlocal peak
        async with gate.permit() as permit:
            peak = max(peak, gate.inflight)
            await asyncio.sleep(0)
            clock.now += 0.1
            permit.outcome("ok")

    async def main() -> None:
        await asyncio.gather(*(call() for _ in range(6)))

    asyncio.run(main())
    assert peak == 2 and gate.inflight == 0


def test_retry_after_is_waited_out_on_the_injected_clock() -> None:
    clock = _Clock()
    gate = AdmissionGate(AIMDLimiter(), cooldown=Cooldown(), clock=clock, sleep=clock.sleep)

    async def main() -> None:
        async with gate.permit() as permit:
            permit.outcome("rejected", retry_after_s=3.0)
        async with gate.permit() as permit:
            permit.outcome("ok")

    asyncio.run(main())
    assert clock.slept == [pytest.approx(3.0)]


def test_throttle_refuses_locally_after_many_refusals() -> None:
    clock = _Clock()
    throttle = ClientThrottle()
    for i in range(20):
        throttle.record(i * 0.01, accepted=False)
    gate = AdmissionGate(AIMDLimiter(), throttle=throttle, clock=clock, draw=lambda: 0.0)

    async def main() -> None:
        async with gate.permit():
            pass

    with pytest.raises(Throttled):
        asyncio.run(main())


async def test_try_enter_answers_at_once_and_leave_records_the_outcome() -> None:
    from closedloop import ConfigurationError
    from closedloop.execution import Permit
    from closedloop.feedback import MemoryProviderState

    clock = _Clock()
    limiter = AIMDLimiter(AIMDConfig(initial=1, min_limit=1))
    gate = AdmissionGate(limiter, state=MemoryProviderState(), clock=clock, sleep=clock.sleep)
    first = await gate.try_enter()
    assert isinstance(first, Permit) and gate.inflight == 1
    refused = await gate.try_enter()  # the limit of one is held: no waiting, a verdict
    assert not isinstance(refused, Permit) and refused.verdict == "full"
    clock.now = 0.4
    first.outcome("rejected", retry_after_s=2.0)
    await gate.leave(first)
    assert gate.inflight == 0 and gate.rejected == 1 and clock.slept == []
    held = await gate.try_enter()  # the Retry-After now holds every caller
    assert not isinstance(held, Permit) and held.verdict == "cooldown"
    assert held.value == pytest.approx(2.0)
    with pytest.raises(ConfigurationError, match="state"):
        await AdmissionGate(limiter, clock=clock).try_enter()
