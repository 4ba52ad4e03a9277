"""The loop retries a read that answers with a passing fault, as the PID schedules it."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from closedloop.agent import (
    ControlConfig,
    ReadRetry,
    RunLimits,
    Runtime,
    stop_on_no_progress,
    stop_on_repeats,
)
from closedloop.agent._reads import is_transient
from closedloop.execution import AtomicAction, EffectClass
from closedloop.feedback import MemoryStore
from closedloop.perception import Observation, ObservationStatus

from .conftest import FakeClock, call, final, make_agent, scripted


def http_error(code: int) -> Observation:
    return Observation.failed(f"HTTP {code}", source="lookup", meaning=f"lookup answered {code}")


class Flaky:
    """A read whose answers are scripted: each call takes the next one."""

    def __init__(self, *answers: Observation) -> None:
        self.answers = list(answers)
        self.calls = 0

    async def lookup(self, city: str) -> Observation:
        """Look a city up."""
        answer = self.answers[min(self.calls, len(self.answers) - 1)]
        self.calls += 1
        return answer


def ok(city: str = "Paris") -> Observation:
    return Observation.ok({"city": city, "temp_c": 21}, source="lookup")


async def hot_store(tool: str = "lookup") -> MemoryStore:
    """A store whose PID history for ``tool`` is all errors: the schedule allows a retry."""
    store = MemoryStore()
    await store.record_put("control", tool, {"errors": [1.0, 1.0, 1.0]})
    return store


async def test_a_503_answer_is_asked_again_with_the_scheduled_delay(clock: FakeClock) -> None:
    world = Flaky(http_error(503), ok())
    model = scripted(call("lookup", city="Paris"), final("21"))
    agent, _ = make_agent(
        model,
        [world.lookup],
        runtime=Runtime(clock=clock, sleep=clock.sleep, store=await hot_store()),
    )
    result = await agent.run("weather in Paris")
    step = result.steps[0]
    assert step.actuators["max_retries"] >= 1
    assert world.calls == 2
    assert step.observation is not None and step.observation["status"] == "ok"
    assert [r["status"] for r in step.retries] == ["error"]
    delay = step.actuators["retry_delay_ms"] / 1000.0
    assert step.retries[0]["delay_s"] == pytest.approx(delay)
    assert delay in clock.slept
    assert result.success


async def test_the_retries_stop_at_the_scheduled_count(clock: FakeClock) -> None:
    world = Flaky(http_error(503))
    model = scripted(call("lookup", city="Paris"), final("none"))
    agent, _ = make_agent(
        model,
        [world.lookup],
        runtime=Runtime(clock=clock, sleep=clock.sleep, store=await hot_store()),
    )
    result = await agent.run("weather in Paris")
    step = result.steps[0]
    assert world.calls == 1 + step.actuators["max_retries"]
    assert len(step.retries) == step.actuators["max_retries"]
    assert step.observation is not None and step.observation["status"] == "error"


async def test_a_cold_controller_does_not_retry_but_the_model_may_ask_again(
    clock: FakeClock,
) -> None:
    world = Flaky(http_error(503), ok())
    model = scripted(call("lookup", city="Paris"), call("lookup", city="Paris"), final("21"))
    agent, _ = make_agent(model, [world.lookup], runtime=Runtime(clock=clock, sleep=clock.sleep))
    result = await agent.run("weather in Paris")
    first, second = result.steps[0], result.steps[1]
    assert first.actuators["max_retries"] == 0 and first.retries == []
    assert second.repeat_count == 0  # a retry after a passing fault, not a loop
    assert second.observation is not None and second.observation["status"] == "ok"
    assert world.calls == 2


async def test_a_real_loop_on_a_failing_read_still_stops(clock: FakeClock) -> None:
    world = Flaky(http_error(503))
    model = scripted(call("lookup", city="Paris"), cycle=True)
    policy = ReadRetry(repeats_after_fault=1)
    agent, _ = make_agent(
        model,
        [world.lookup],
        limits=RunLimits(max_steps=8, stop=stop_on_no_progress(50) | stop_on_repeats(2)),
        runtime=Runtime(clock=clock, sleep=clock.sleep),
        control=ControlConfig(read_retry=policy),
    )
    result = await agent.run("weather in Paris")
    # the first try, then one let-through repeat (with its own scheduled retries)
    assert world.calls == 1 + 1 + len(result.steps[1].retries)
    assert result.steps[1].repeat_count == 0 and result.steps[2].repeat_count >= 1
    assert result.halt_reason.value in {"repeated_action", "step_limit"}


async def test_a_4xx_is_a_definite_answer(clock: FakeClock) -> None:
    world = Flaky(http_error(404), ok())
    model = scripted(call("lookup", city="Paris"), final("unknown"))
    agent, _ = make_agent(
        model,
        [world.lookup],
        runtime=Runtime(clock=clock, sleep=clock.sleep, store=await hot_store()),
    )
    result = await agent.run("weather in Paris")
    assert world.calls == 1 and result.steps[0].retries == []


async def test_a_429_waits_for_retry_after_within_the_cap(clock: FakeClock) -> None:
    limited = Observation.rate_limited(source="lookup", retry_after_s=30.0)
    world = Flaky(limited, ok())
    model = scripted(call("lookup", city="Paris"), final("21"))
    agent, _ = make_agent(
        model,
        [world.lookup],
        runtime=Runtime(clock=clock, sleep=clock.sleep, store=await hot_store()),
        control=ControlConfig(read_retry=ReadRetry(max_backoff_s=4.0)),
    )
    result = await agent.run("weather in Paris")
    assert result.steps[0].retries[0]["status"] == "rate_limited"
    assert result.steps[0].retries[0]["delay_s"] == pytest.approx(4.0)
    assert 4.0 in clock.slept


async def test_disabled_policy_leaves_the_answer_to_the_model(clock: FakeClock) -> None:
    world = Flaky(http_error(503), ok())
    model = scripted(call("lookup", city="Paris"), final("none"))
    agent, _ = make_agent(
        model,
        [world.lookup],
        runtime=Runtime(clock=clock, sleep=clock.sleep, store=await hot_store()),
        control=ControlConfig(read_retry=ReadRetry(enabled=False)),
    )
    result = await agent.run("weather in Paris")
    assert world.calls == 1 and result.steps[0].retries == []


async def test_an_effect_answering_503_is_not_retried_by_the_loop(clock: FakeClock) -> None:
    calls: list[dict[str, Any]] = []

    async def pay(amount: int) -> Observation:
        """Pay once."""
        calls.append({"amount": amount})
        return Observation.failed("HTTP 503", source="pay")

    action = AtomicAction(name="pay", fn=pay, effect=EffectClass.ONCE)
    model = scripted(call("pay", amount=3), final("no"))
    agent, _ = make_agent(
        model, [action], runtime=Runtime(sleep=clock.sleep, store=await hot_store("pay"))
    )
    result = await agent.run("pay 3")
    assert len(calls) == 1 and result.steps[0].retries == []


async def test_an_empty_answer_is_rechecked_when_the_error_is_high(clock: FakeClock) -> None:
    world = Flaky(Observation.empty(source="lookup"), ok())
    model = scripted(call("lookup", city="Paris"), final("21"))
    agent, _ = make_agent(
        model,
        [world.lookup],
        runtime=Runtime(clock=clock, sleep=clock.sleep, store=await hot_store()),
    )
    result = await agent.run("weather in Paris")
    step = result.steps[0]
    assert world.calls == 2
    assert step.retries[0]["status"] == "empty" and "empty" in step.retries[0]["reason"]
    assert step.observation is not None and step.observation["status"] == "ok"


async def test_an_empty_answer_is_accepted_when_nothing_is_wrong(clock: FakeClock) -> None:
    world = Flaky(Observation.empty(source="lookup"), ok())
    model = scripted(call("lookup", city="Paris"), final("no match"))
    agent, _ = make_agent(model, [world.lookup], runtime=Runtime(clock=clock, sleep=clock.sleep))
    result = await agent.run("weather in Paris")
    assert world.calls == 1 and result.steps[0].retries == []


async def test_an_empty_recheck_can_be_turned_off(clock: FakeClock) -> None:
    world = Flaky(Observation.empty(source="lookup"), ok())
    model = scripted(call("lookup", city="Paris"), final("no match"))
    agent, _ = make_agent(
        model,
        [world.lookup],
        runtime=Runtime(clock=clock, sleep=clock.sleep, store=await hot_store()),
        control=ControlConfig(read_retry=ReadRetry(recheck_empty=False)),
    )
    result = await agent.run("weather in Paris")
    assert world.calls == 1 and result.steps[0].retries == []


@given(code=st.integers(min_value=100, max_value=599))
def test_only_server_errors_are_transient(code: int) -> None:
    assert is_transient(http_error(code)) is (code >= 500)


def test_timeouts_and_rate_limits_are_transient_and_answers_are_not() -> None:
    assert is_transient(Observation.timeout(source="lookup", timeout_s=1.0))
    assert is_transient(Observation.rate_limited(source="lookup"))
    assert not is_transient(ok())
    assert not is_transient(Observation.empty(source="lookup"))
    partial = ok().model_copy(update={"status": ObservationStatus.PARTIAL})
    assert not ReadRetry().should_retry(partial)
    assert ReadRetry(partial=True).should_retry(partial)


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="max_backoff_s"):
        ReadRetry(max_backoff_s=-1.0)
    with pytest.raises(ValueError, match="repeats_after_fault"):
        ReadRetry(repeats_after_fault=-1)


def test_read_retry_is_a_retry_condition_of_the_policy_algebra() -> None:
    from closedloop.policy import Policy, PolicyState, Verdict, retry_sync

    policy = ReadRetry(max_backoff_s=2.0)
    assert isinstance(policy, Policy)
    assert policy(PolicyState(outcome=http_error(503))) == "passing fault"
    assert policy(PolicyState(outcome=http_error(404))) is None
    assert policy(PolicyState(outcome=ok())) is None
    assert policy(PolicyState(error=OSError("raised, not answered"))) is None
    limited = Observation.rate_limited(source="lookup", retry_after_s=30.0)
    plan = policy.retry_policy(3, scheduled_ms=250.0)
    first = plan.decide(PolicyState(attempt=1, outcome=limited))
    assert first.verdict is Verdict.WAIT and first.delay_s == 2.0  # Retry-After, capped
    assert plan.decide(PolicyState(attempt=1, outcome=http_error(502))).delay_s == 0.25
    assert plan.decide(PolicyState(attempt=3, outcome=http_error(502))).verdict is Verdict.STOP
    # The same policy drives the one retry loop: two faults, then the answer.
    answers = iter([http_error(503), http_error(504), ok()])
    slept: list[float] = []
    done = retry_sync(lambda n: next(answers), plan, sleep=slept.append, clock=lambda: 0.0)
    assert done.unwrap().status is ObservationStatus.OK
    assert done.attempts == 3 and slept == [0.25, 0.25]
