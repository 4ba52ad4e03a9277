"""Tool health in the loop: no calls into a tool taken as down, timeouts from its latency."""

from __future__ import annotations

import pytest

from closedloop import ConfigurationError
from closedloop.agent import ControlConfig, HealthSettings, RunLimits, Runtime
from closedloop.agent._health import ToolHealth
from closedloop.perception import Observation

from .conftest import FakeClock, call, final, make_agent, scripted
from .test_read_retry import http_error


class Down:
    """A read that always answers 503, and counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    async def lookup(self, city: str) -> Observation:
        """Look a city up."""
        self.calls += 1
        return http_error(503)


async def test_a_tool_that_keeps_failing_is_not_called_once_its_breaker_opens(
    clock: FakeClock,
) -> None:
    world = Down()
    model = scripted(call("lookup", city="Paris"), cycle=True)
    health = HealthSettings(failure_threshold=2, recovery_s=60.0)
    agent, _ = make_agent(
        model,
        [world.lookup],
        control=ControlConfig(health=health),
        limits=RunLimits(max_steps=6),
        runtime=Runtime(clock=clock, sleep=clock.sleep),
    )
    result = await agent.run("weather in Paris")
    refused = [s for s in result.steps if s.observation and "taken as down" in str(s.observation)]
    assert refused, [s.observation for s in result.steps]
    first = result.steps.index(refused[0])
    # the two calls (each with its scheduled retries) that opened it, nothing after
    assert first == 2
    assert world.calls == sum(1 + len(s.retries) for s in result.steps[:first])
    # The next run of the same agent finds the breaker still open: no request at all.
    before = world.calls
    again = await agent.run("weather in Paris")
    assert world.calls == before
    assert again.steps and "taken as down" in str(again.steps[0].observation)


async def test_after_the_recovery_time_one_probe_goes_through(clock: FakeClock) -> None:
    world = Down()
    model = scripted(call("lookup", city="Paris"), final("unknown"), cycle=True)
    health = HealthSettings(failure_threshold=1, recovery_s=10.0)
    agent, _ = make_agent(
        model,
        [world.lookup],
        control=ControlConfig(health=health),
        runtime=Runtime(clock=clock, sleep=clock.sleep),
    )
    await agent.run("weather in Paris")
    assert world.calls == 1
    clock.advance(11.0)
    probe = await agent.run("weather in Paris")
    assert world.calls > 1  # half-open: the probe was let through
    assert "taken as down" not in str(probe.steps[0].observation)


def test_the_timeout_follows_the_measured_latency() -> None:
    now = [0.0]
    health = ToolHealth(HealthSettings(min_samples=3, headroom=2.0), lambda: now[0])
    assert health.timeout_s("lookup") is None  # too few samples: the schedule's timeout
    for latency in (0.5, 0.4, 0.6):
        health.record_latency("lookup", latency)
    timeout = health.timeout_s("lookup")
    assert timeout is not None and 0.8 < timeout <= 1.2
    for _ in range(20):
        health.record_latency("lookup", 100.0)
    assert health.timeout_s("lookup") == 30.0  # capped at max_timeout_s
    assert health.snapshot()["lookup"]["breaker"] == "closed"


async def test_a_slow_tool_gets_the_timeout_its_latency_says(clock: FakeClock) -> None:
    class Slow:
        calls = 0

        async def lookup(self, city: str) -> Observation:
            """Look a city up."""
            self.calls += 1
            clock.advance(0.5)
            return Observation.ok({"city": city}, source="lookup")

    world = Slow()
    health = HealthSettings(min_samples=2, latency_window=5, headroom=4.0)
    agent, _ = make_agent(
        scripted(call("lookup", city="Paris"), final("ok"), cycle=True),
        [world.lookup],
        control=ControlConfig(health=health),
        runtime=Runtime(clock=clock, sleep=clock.sleep),
    )
    for _ in range(3):
        result = await agent.run("weather in Paris")
        assert result.success
    assert agent._health is not None  # type: ignore[attr-defined]
    assert agent._health.timeout_s("lookup") == pytest.approx(2.0)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("options", "name"),
    [
        ({"failure_threshold": 0}, "failure_threshold"),
        ({"recovery_s": 0.0}, "recovery_s"),
        ({"min_samples": 30, "latency_window": 10}, "min_samples"),
        ({"min_timeout_s": 5.0, "max_timeout_s": 1.0}, "min_timeout_s"),
        ({"headroom": 0.0}, "headroom"),
    ],
)
def test_health_settings_that_cannot_hold_are_refused(options: dict[str, float], name: str) -> None:
    with pytest.raises(ConfigurationError, match=name):
        HealthSettings(**options)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="health"):
        ControlConfig(health=3)  # type: ignore[arg-type]
