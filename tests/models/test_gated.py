"""GatedModel: attempts through the admission gate, retries only from the budget."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from closedloop import (
    ModelRateLimitError,
    ModelResponseError,
    ModelTimeoutError,
    TransientModelError,
)
from closedloop.control import AIMDLimiter, ClientThrottle, Cooldown, RetryBudget, RetryBudgetConfig
from closedloop.execution import AdmissionGate
from closedloop.feedback import MemoryProviderState
from closedloop.models import FunctionModel, GatedModel


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


def _scripted(*failures: Exception) -> FunctionModel:
    queue = list(failures)

    def answer(messages: Any, call: Any) -> str:
        if queue:
            raise queue.pop(0)
        return "fine"

    return FunctionModel(answer)


async def test_a_429_is_waited_out_for_every_caller_then_retried() -> None:
    clock = _Clock()
    gate = AdmissionGate(AIMDLimiter(), cooldown=Cooldown(), clock=clock, sleep=clock.sleep)
    model = GatedModel(_scripted(ModelRateLimitError("busy", retry_after=2.0)), gate)
    completion = await model.complete("hello")
    assert completion.text == "fine"
    assert model.retries == 1 and gate.rejected == 1
    assert clock.slept == [2.0]  # the gate held the retry for the Retry-After


async def test_no_retry_once_the_shared_budget_is_spent() -> None:
    clock = _Clock()
    state = MemoryProviderState(budget_cap=1.0, budget_ratio=0.0, budget_per_s=0.0)
    gate = AdmissionGate(AIMDLimiter(), state=state, clock=clock, sleep=clock.sleep)
    model = GatedModel(
        _scripted(*(ModelTimeoutError("slow") for _ in range(3))), gate, sleep=clock.sleep
    )
    with pytest.raises(ModelTimeoutError):
        await model.complete("hello")
    assert model.retries == 1  # the budget held one retry; the third attempt was never made
    assert (await state.snapshot(clock())).retry_tokens == 0.0


async def test_a_failure_not_about_capacity_passes_through_at_once() -> None:
    clock = _Clock()
    budget = RetryBudget(RetryBudgetConfig())
    gate = AdmissionGate(AIMDLimiter(), budget=budget, clock=clock, sleep=clock.sleep)
    model = GatedModel(_scripted(ModelResponseError("bad request")), gate)
    with pytest.raises(ModelResponseError):
        await model.complete("hello")
    assert model.retries == 0 and gate.rejected == 0


async def test_local_throttling_reaches_the_caller_as_a_rate_limit() -> None:
    clock = _Clock()
    throttle = ClientThrottle()
    for _ in range(50):
        throttle.record(0.0, accepted=False)
    gate = AdmissionGate(AIMDLimiter(), throttle=throttle, clock=clock, draw=lambda: 0.0)
    with pytest.raises(ModelRateLimitError, match="refused locally"):
        await GatedModel(_scripted(), gate).complete("hello")


def test_bad_arguments_are_named() -> None:
    gate = AdmissionGate(AIMDLimiter(), clock=_Clock())
    with pytest.raises(Exception, match="max_attempts"):
        GatedModel(_scripted(), gate, max_attempts=0)


async def test_a_busy_answer_without_retry_after_pauses_doubling_each_time() -> None:
    clock = _Clock()
    gate = AdmissionGate(AIMDLimiter(), budget=RetryBudget(), clock=clock, sleep=clock.sleep)
    busy = (TransientModelError("503"), TransientModelError("503"))
    model = GatedModel(_scripted(*busy), gate, sleep=clock.sleep, retry_wait_s=0.5)
    assert (await model.complete("hello")).text == "fine"
    assert clock.slept == [0.5, 1.0] and model.retries == 2


async def test_the_budget_is_not_asked_for_a_retry_the_attempts_do_not_allow() -> None:
    clock = _Clock()
    state = MemoryProviderState(budget_cap=5.0, budget_ratio=0.0, budget_per_s=0.0)
    gate = AdmissionGate(AIMDLimiter(), state=state, clock=clock, sleep=clock.sleep)
    slow = (ModelTimeoutError("slow") for _ in range(3))
    model = GatedModel(_scripted(*slow), gate, sleep=clock.sleep, max_attempts=2)
    with pytest.raises(ModelTimeoutError, match="slow"):
        await model.complete("hello")
    assert model.retries == 1
    assert (await state.snapshot(clock())).retry_tokens == 4.0  # one retry taken, no more
