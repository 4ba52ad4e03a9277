"""Acting on the estimate: a 429 storm waited out, an observe-only breaker, early handover."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from closedloop import ConfigurationError
from closedloop.agent import (
    ControlConfig,
    EarlyHandover,
    HaltReason,
    HealthSettings,
    ReadRetry,
    RunLimits,
    Runtime,
    StormWait,
    stop_on_no_progress,
)
from closedloop.agent._acting import finish_chance, handover_reason
from closedloop.perception import Observation

from .conftest import FakeClock, call, final, make_agent, scripted
from .test_health import Down
from .test_read_retry import Flaky, ok


def limited(after: float | None = 2.0) -> Observation:
    return Observation.rate_limited(source="lookup", retry_after_s=after)


# --- a 429 storm, waited out ----------------------------------------------------------------


async def storm_run(clock: FakeClock, world: Flaky, read_retry: ReadRetry, **options: object):
    # A cold store: the PID starts at u = 0, where the default schedule gives no retry, so
    # every further request of the call comes from the storm wait alone.
    agent, _ = make_agent(
        scripted(call("lookup", city="Paris"), final("21")),
        [world.lookup],
        runtime=Runtime(clock=clock, sleep=clock.sleep),
        **options,
        control=ControlConfig(read_retry=read_retry),
    )
    return await agent.run("weather in Paris")


async def test_without_a_storm_wait_a_calm_read_spends_its_one_attempt_on_the_429(
    clock: FakeClock,
) -> None:
    world = Flaky(limited(), limited(), ok())
    result = await storm_run(clock, world, ReadRetry())
    step = result.steps[0]
    assert step.actuators["max_retries"] == 0
    assert world.calls == 1 and step.retries == []
    assert "acted" not in step.actuators


async def test_a_429_with_retry_after_is_waited_out_without_spending_an_attempt(
    clock: FakeClock,
) -> None:
    world = Flaky(limited(2.0), limited(2.0), ok())
    result = await storm_run(clock, world, ReadRetry(storm=StormWait()))
    step = result.steps[0]
    assert step.actuators["max_retries"] == 0  # the one attempt is still the whole budget
    assert world.calls == 3 and result.success
    assert [r["delay_s"] for r in step.retries] == [2.0, 2.0]
    assert all(r["reason"].startswith("429 storm") for r in step.retries)
    assert clock.slept.count(2.0) == 2
    assert len(step.actuators["acted"]) == 2
    assert all("Retry-After" in a for a in step.actuators["acted"])


async def test_the_waits_are_capped_by_their_time_budget(clock: FakeClock) -> None:
    world = Flaky(limited(100.0))  # a storm that never ends
    storm = StormWait(max_wait_s=5.0, max_total_s=12.0)
    result = await storm_run(clock, world, ReadRetry(storm=storm))
    step = result.steps[0]
    # Two waits of 5 s fit in 12 s, a third does not: then a 429 is an ordinary fault.
    assert world.calls == 3
    assert [r["delay_s"] for r in step.retries] == [5.0, 5.0]
    assert step.observation is not None and step.observation["status"] == "rate_limited"


async def test_the_waits_may_also_be_capped_by_count(clock: FakeClock) -> None:
    world = Flaky(limited(1.0))
    result = await storm_run(clock, world, ReadRetry(storm=StormWait(max_waits=2)))
    assert world.calls == 3 and len(result.steps[0].retries) == 2


async def test_a_wait_past_the_deadline_is_not_taken(clock: FakeClock) -> None:
    world = Flaky(limited(30.0), ok())
    result = await storm_run(
        clock, world, ReadRetry(storm=StormWait()), limits=RunLimits(deadline_s=20.0)
    )
    assert world.calls == 1
    assert 30.0 not in clock.slept and result.steps[0].retries == []


async def test_a_retry_after_of_zero_is_asked_again_at_once_and_not_counted(
    clock: FakeClock,
) -> None:
    world = Flaky(limited(0.0), ok())
    result = await storm_run(clock, world, ReadRetry(storm=StormWait()))
    assert world.calls == 2 and [r["delay_s"] for r in result.steps[0].retries] == [0.0]
    assert 0.0 not in clock.slept  # no wait of zero is slept


async def test_a_429_without_retry_after_is_not_a_storm_wait(clock: FakeClock) -> None:
    world = Flaky(limited(None), ok())
    result = await storm_run(clock, world, ReadRetry(storm=StormWait()))
    assert world.calls == 1 and result.steps[0].retries == []


def test_storm_settings_that_cannot_hold_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="max_waits"):
        StormWait(max_waits=0)
    with pytest.raises(ConfigurationError, match="max_wait_s"):
        StormWait(max_wait_s=0.0)
    with pytest.raises(ConfigurationError, match="max_total_s"):
        StormWait(max_total_s=-1.0)
    assert StormWait(max_total_s=3.0).allows(5, 2.0, 1.0)
    assert not StormWait(max_total_s=3.0).allows(0, 2.5, 1.0)
    assert not StormWait(max_waits=1).allows(1, 0.0, 0.0)
    with pytest.raises(ConfigurationError, match="storm"):
        ReadRetry(storm=3)  # type: ignore[arg-type]
    assert StormWait(max_wait_s=5.0).delay_s(9.0) == 5.0
    assert StormWait().delay_s(1.5) == 1.5


# --- the breaker, kept but not acted on -------------------------------------------------------


async def test_a_breaker_that_does_not_refuse_keeps_its_state(clock: FakeClock) -> None:
    world = Down()
    health = HealthSettings(failure_threshold=2, recovery_s=60.0, refuse_open=False)
    agent, _ = make_agent(
        scripted(call("lookup", city="Paris"), cycle=True),
        [world.lookup],
        control=ControlConfig(health=health),
        limits=RunLimits(max_steps=5),
        runtime=Runtime(clock=clock, sleep=clock.sleep),
    )
    result = await agent.run("weather in Paris")
    assert not any("taken as down" in str(s.observation) for s in result.steps)
    ran = [s for s in result.steps if s.action is not None and s.repeat_count == 0]
    assert len(ran) > health.failure_threshold  # calls went on past the threshold
    assert agent._health is not None  # type: ignore[attr-defined]
    assert agent._health.snapshot()["lookup"]["breaker"] == "open"  # type: ignore[attr-defined]
    with pytest.raises(ConfigurationError, match="refuse_open"):
        HealthSettings(refuse_open="no")  # type: ignore[arg-type]


async def test_a_call_its_breaker_refuses_is_recorded_as_acted(clock: FakeClock) -> None:
    world = Down()
    agent, _ = make_agent(
        scripted(call("lookup", city="Paris"), cycle=True),
        [world.lookup],
        control=ControlConfig(health=HealthSettings(failure_threshold=2)),
        limits=RunLimits(max_steps=4),
        runtime=Runtime(clock=clock, sleep=clock.sleep),
    )
    result = await agent.run("weather in Paris")
    acted = [a for s in result.steps for a in s.actuators.get("acted", ())]
    assert acted and all(a.startswith("breaker open: lookup") for a in acted)


# --- early handover -----------------------------------------------------------------------------


def reason(**overrides: object) -> str | None:
    options: dict[str, object] = {
        "f_est": 0.0,
        "level": 0.8,
        "steps_left": 5,
        "time_left_s": 100.0,
        "step_s": 1.0,
        "breaker_wait_s": None,
        "tool": "lookup",
    }
    options.update(overrides)
    return handover_reason(EarlyHandover(), **options)  # type: ignore[arg-type]


def test_finish_chance_is_one_minus_f_to_the_steps_left() -> None:
    assert finish_chance(0.5, 2) == pytest.approx(0.75)
    assert finish_chance(0.9, 1) == pytest.approx(0.1)
    assert finish_chance(0.3, 0) == 0.0
    assert finish_chance(0.0, 1) == 1.0


@given(
    st.floats(0.0, 1.0),
    st.floats(0.0, 1.0),
    st.integers(0, 50),
    st.integers(0, 50),
)
def test_finish_chance_is_a_probability_that_falls_with_f_and_rises_with_steps(
    f: float, g: float, n: int, m: int
) -> None:
    chance = finish_chance(f, n)
    assert 0.0 <= chance <= 1.0
    lo, hi = sorted((f, g))
    assert finish_chance(hi, n) <= finish_chance(lo, n) + 1e-12
    few, many = sorted((n, m))
    assert finish_chance(f, few) <= finish_chance(f, many) + 1e-12


def test_the_estimate_hands_over_only_above_its_level_and_below_the_chance() -> None:
    assert reason(f_est=0.7, steps_left=1) is None  # below the level: never projected
    assert reason(f_est=0.9, steps_left=10) is None  # 1 - 0.9**10 = 0.65 >= 0.5
    why = reason(f_est=0.9, steps_left=3)  # 1 - 0.9**3 = 0.27
    assert why is not None and "f_est 0.90" in why and "0.27" in why
    # The time left bounds the steps that can still run at the run's pace.
    assert reason(f_est=0.9, steps_left=10, time_left_s=3.0, step_s=1.0) is not None
    assert handover_reason(
        EarlyHandover(level=0.5),
        f_est=0.6,
        level=0.8,
        steps_left=1,
        time_left_s=10.0,
        step_s=None,
        breaker_wait_s=None,
        tool=None,
    )


def test_an_open_breaker_hands_over_when_it_outlasts_the_steps_left() -> None:
    why = reason(breaker_wait_s=30.0, steps_left=4, step_s=0.5)
    assert why is not None and "breaker is open" in why
    assert reason(breaker_wait_s=1.0, steps_left=4, step_s=0.5) is None  # it reopens in time
    assert reason(breaker_wait_s=None, steps_left=4, step_s=0.5) is None
    off = EarlyHandover(breaker=False)
    assert (
        handover_reason(
            off,
            f_est=0.0,
            level=0.8,
            steps_left=4,
            time_left_s=100.0,
            step_s=0.5,
            breaker_wait_s=30.0,
            tool="lookup",
        )
        is None
    )


async def test_a_run_whose_tool_is_down_is_handed_over_early(clock: FakeClock) -> None:
    async def run(early: EarlyHandover | None) -> tuple[int, object]:
        # No stop on a lack of progress: without the handover the run goes to its step limit.
        world = Down()
        agent, _ = make_agent(
            scripted(call("lookup", city="Paris"), cycle=True),
            [world.lookup],
            control=ControlConfig(
                health=HealthSettings(failure_threshold=2, recovery_s=60.0),
                early_handover=early,
            ),
            limits=RunLimits(max_steps=6, stop=stop_on_no_progress(10)),
            runtime=Runtime(clock=clock, sleep=clock.sleep),
        )
        result = await agent.run("weather in Paris")
        return world.calls, result

    _, result = await run(EarlyHandover())
    assert result.halt_reason is HaltReason.HANDOVER  # type: ignore[attr-defined]
    last = result.steps[-1]  # type: ignore[attr-defined]
    assert any(a.startswith("early handover: lookup's breaker") for a in last.actuators["acted"])
    assert any("early handover" in n for n in last.notes)
    steps = len(result.steps)  # type: ignore[attr-defined]
    assert last.action is not None and last.retries == []  # the handover step made no request
    _, ignored = await run(None)
    assert ignored.halt_reason is HaltReason.STEP_LIMIT  # type: ignore[attr-defined]
    assert len(ignored.steps) > steps  # type: ignore[attr-defined]


async def test_a_run_whose_estimate_says_it_cannot_finish_is_handed_over(
    clock: FakeClock,
) -> None:
    async def run(early: EarlyHandover | None) -> tuple[int, object]:
        # A new city each step (no repeat guard), every answer a 503, no breaker: only the
        # disturbance estimate can tell this run it will not finish.
        world = Down()
        agent, _ = make_agent(
            scripted(*(call("lookup", city=f"city {i}") for i in range(12))),
            [world.lookup],
            control=ControlConfig(protocols=False, early_handover=early),
            limits=RunLimits(max_steps=12, stop=stop_on_no_progress(20)),
            runtime=Runtime(clock=clock, sleep=clock.sleep),
        )
        result = await agent.run("weather in twelve cities")
        return world.calls, result

    calls, result = await run(EarlyHandover())
    assert result.halt_reason is HaltReason.HANDOVER  # type: ignore[attr-defined]
    steps = result.steps  # type: ignore[attr-defined]
    assert all(s.protocol == "normal" for s in steps)  # protocols off: the setting acted
    assert steps[-2].f_est >= 0.8
    assert any(a.startswith("early handover: f_est") for a in steps[-1].actuators["acted"])
    ignored_calls, ignored = await run(None)
    assert ignored.halt_reason is HaltReason.STEP_LIMIT  # type: ignore[attr-defined]
    assert ignored_calls > calls


def test_early_handover_settings_that_cannot_hold_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="level"):
        EarlyHandover(level=1.5)
    with pytest.raises(ConfigurationError, match="min_chance"):
        EarlyHandover(min_chance=-0.1)
    with pytest.raises(ConfigurationError, match="early_handover"):
        ControlConfig(early_handover=3)  # type: ignore[arg-type]
