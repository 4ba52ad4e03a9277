"""Rules first, the model past a gate: a rule that clears the gate makes the next call."""

from __future__ import annotations

import dataclasses

import pytest

from closedloop import ConfigurationError
from closedloop.agent import ControlConfig, ReadRetry, RunLimits, Runtime
from closedloop.decision import RULE_ACTIONS, RuleGate
from closedloop.perception import Observation

from .conftest import FakeClock, call, final, make_agent, scripted
from .test_read_retry import Flaky, http_error, ok


def limited(after: float | None = 2.0) -> Observation:
    return Observation.rate_limited(source="lookup", retry_after_s=after)


def http_503() -> Observation:
    return http_error(503)


DEFAULT_GATE = RuleGate()


def gated(gate: RuleGate | None = DEFAULT_GATE) -> ControlConfig:
    return ControlConfig(rule_gate=gate)


async def test_a_429_with_retry_after_is_waited_out_and_called_again_without_the_model(
    clock: FakeClock,
) -> None:
    world = Flaky(limited(2.0), ok())
    model = scripted(call("lookup", city="Paris"), final("21"))
    agent, _ = make_agent(
        model, [world.lookup], control=gated(), runtime=Runtime(clock=clock, sleep=clock.sleep)
    )
    result = await agent.run("weather in Paris")
    assert result.success and world.calls == 2
    ruled = result.steps[1]
    assert ruled.actuators["proposed_by"] == "rule:back_off"
    assert ruled.usage.model_calls == 0
    assert ruled.observation is not None and ruled.observation["status"] == "ok"
    assert 2.0 in clock.slept
    # two model calls in all: the first proposal and the final answer
    assert result.usage.model_calls == 2


async def test_without_a_gate_the_model_makes_the_same_call_again(clock: FakeClock) -> None:
    world = Flaky(limited(2.0), ok())
    model = scripted(call("lookup", city="Paris"), call("lookup", city="Paris"), final("21"))
    agent, _ = make_agent(
        model, [world.lookup], control=gated(None), runtime=Runtime(clock=clock, sleep=clock.sleep)
    )
    result = await agent.run("weather in Paris")
    assert result.success and world.calls == 2
    assert result.steps[1].actuators["proposed_by"] == "model"
    assert result.usage.model_calls == 3


async def test_a_rule_below_the_gate_leaves_the_call_to_the_model(clock: FakeClock) -> None:
    # A 503 with no other healthy source: "retry later" at confidence 0.5, under a gate of 0.6.
    world = Flaky(http_503(), ok())
    model = scripted(call("lookup", city="Paris"), call("lookup", city="Paris"), final("21"))
    agent, _ = make_agent(
        model,
        [world.lookup],
        control=gated(RuleGate(base=0.6)),
        runtime=Runtime(clock=clock, sleep=clock.sleep),
    )
    result = await agent.run("weather in Paris")
    assert result.success
    assert result.steps[1].actuators["proposed_by"] == "model"
    assert any("< gate 0.60" in n for n in result.steps[1].notes)
    assert result.usage.model_calls == 3


async def test_the_gate_rises_while_the_fault_persists(clock: FakeClock) -> None:
    # Every answer is a 503: the rule retries once at the low gate (no error before the
    # fault); after that the tool's recent error is 1 and the gate (0.9) is above the
    # rule's 0.5, so the model is asked.
    world = Flaky(http_503())
    model = scripted(call("lookup", city="Paris"), final("unknown"), cycle=True)
    agent, _ = make_agent(
        model,
        [world.lookup],
        control=dataclasses.replace(gated(), read_retry=ReadRetry(repeats_after_fault=3)),
        limits=RunLimits(max_steps=4),
        runtime=Runtime(clock=clock, sleep=clock.sleep),
    )
    result = await agent.run("weather in Paris")
    proposers = [s.actuators["proposed_by"] for s in result.steps]
    assert proposers[:3] == ["model", "rule:switch_source", "model"]
    assert result.steps[1].usage.model_calls == 0
    assert any("< gate 0.90" in note for note in result.steps[2].notes)


async def test_a_rule_never_repeats_a_call_past_the_repeat_budget(clock: FakeClock) -> None:
    world = Flaky(limited(1.0))
    model = scripted(call("lookup", city="Paris"), final("unknown"), cycle=True)
    agent, _ = make_agent(
        model,
        [world.lookup],
        control=dataclasses.replace(
            gated(RuleGate(slope=0.0)), read_retry=ReadRetry(repeats_after_fault=1)
        ),
        limits=RunLimits(max_steps=5),
        runtime=Runtime(clock=clock, sleep=clock.sleep),
    )
    result = await agent.run("weather in Paris")
    ruled = [s for s in result.steps if s.actuators["proposed_by"].startswith("rule:")]
    assert len(ruled) == 1  # the one repeat after a fault the read-retry policy allows
    # each call made (the model's, the rule's) plus the read retries the schedule gave them
    assert world.calls == len(ruled) + 1 + sum(len(s.retries) for s in result.steps)


async def test_a_wait_is_capped_by_the_gate(clock: FakeClock) -> None:
    world = Flaky(limited(600.0), ok())
    model = scripted(call("lookup", city="Paris"), final("21"))
    agent, _ = make_agent(
        model,
        [world.lookup],
        control=gated(RuleGate(max_wait_s=5.0)),
        runtime=Runtime(clock=clock, sleep=clock.sleep),
    )
    result = await agent.run("weather in Paris")
    assert result.success and 5.0 in clock.slept and 600.0 not in clock.slept


def test_the_threshold_moves_with_the_error() -> None:
    gate = RuleGate(base=0.3, slope=0.6)
    assert gate.threshold(0.0) == pytest.approx(0.3)
    assert gate.threshold(0.5) == pytest.approx(0.6)
    assert gate.threshold(1.0) == pytest.approx(0.9)
    assert RuleGate(base=0.8, slope=1.0).threshold(1.0) == 1.0


@pytest.mark.parametrize(
    ("options", "name"),
    [
        ({"base": 1.5}, "base"),
        ({"slope": -1.0}, "slope"),
        ({"window": 0}, "window"),
        ({"max_wait_s": -1.0}, "max_wait_s"),
        ({"actions": frozenset({"widen_query"})}, "actions"),
    ],
)
def test_a_gate_that_cannot_hold_is_refused_naming_the_field(
    options: dict[str, object], name: str
) -> None:
    with pytest.raises(ConfigurationError, match=name):
        RuleGate(**options)  # type: ignore[arg-type]


def test_the_gate_only_carries_out_actions_that_repeat_the_call() -> None:
    assert {"back_off", "retry_later", "widen_timeout", "refresh"} == RULE_ACTIONS
    with pytest.raises(ConfigurationError, match="rule_gate"):
        ControlConfig(rule_gate=0.3)  # type: ignore[arg-type]
