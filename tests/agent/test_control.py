"""Control inside the loop: PID per step type (warm-started), actuators, metrics, ESO, Lyapunov."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from closedloop import ConfigurationError
from closedloop.agent import (
    Agent,
    ControlConfig,
    HaltReason,
    RunLimits,
    Runtime,
    edit_distance_metric,
    stop_on_no_progress,
    stop_on_repeats,
)
from closedloop.agent._control import ControllerBank, rigour_instruction
from closedloop.control import PID, ActuatorSchedule, RegressionESO, select_protocol
from closedloop.feedback import MemoryStore, SQLiteStore
from closedloop.models import CallInfo, FunctionModel, Message
from closedloop.perception import Observation

from .conftest import FakeClock, add, call, final, make_agent, scripted, system_of


def _replayed(errors: list[float]) -> float:
    """What a PID with the default gains outputs after these errors, computed independently."""
    pid = PID(0.8, 0.05, 0.3, setpoint=1.0, output_limits=(0.0, 1.0))
    u = 0.0
    for e in errors:
        u = pid(1.0 - e, dt=1.0)
    return u


async def test_the_first_call_of_a_known_key_starts_from_its_history() -> None:
    store = MemoryStore()
    history = [0.9, 0.8, 0.9, 0.7, 0.9]
    await store.record_put("control", "add", {"errors": history})
    bank = ControllerBank(ControlConfig(), store)
    warm = await bank.output("add")
    cold = await bank.output("never_seen")
    assert warm == pytest.approx(_replayed(history)) and warm > 0.5
    assert cold == 0.0
    assert bank.warm == {"add": 5, "never_seen": 0}


async def test_updates_persist_a_bounded_history() -> None:
    store = MemoryStore()
    bank = ControllerBank(ControlConfig(history_window=3), store)
    for e in (0.1, 0.2, 0.3, 0.4):
        u, (p, i, d) = await bank.update("search", e)
    assert u == pytest.approx(min(1.0, p + i + d))
    record = await store.record_get("control", "search")
    assert record is not None and list(record.value["errors"]) == [0.2, 0.3, 0.4]
    again = ControllerBank(ControlConfig(history_window=3), store)
    assert await again.output("search") == pytest.approx(_replayed([0.2, 0.3, 0.4]))
    off = ControllerBank(ControlConfig(warm_start=False), store)
    assert await off.output("search") == 0.0


async def test_a_new_agent_on_the_same_sqlite_file_is_warm(tmp_path: Path) -> None:
    def flaky_lookup(key: str) -> Any:
        """Always answers badly."""
        return Observation.partial({"key": key}, source="flaky_lookup", missing=["value"])

    path = tmp_path / "state.db"
    first_store = SQLiteStore(path)
    first, _ = make_agent(
        scripted(*(call("flaky_lookup", key=f"k{i}") for i in range(4)), final("x")),
        [flaky_lookup],
        runtime=Runtime(store=first_store),
    )
    await first.run("look up")
    await first_store.close()

    second_store = SQLiteStore(path)
    second, _ = make_agent(
        scripted(call("flaky_lookup", key="z"), final("y")),
        [flaky_lookup],
        runtime=Runtime(store=second_store),
    )
    result = await second.run("look up again")
    await second_store.close()
    cold, _ = make_agent(scripted(call("flaky_lookup", key="z"), final("y")), [flaky_lookup])
    cold_result = await cold.run("look up, cold")
    assert result.steps[0].actuators["u"] == pytest.approx(_replayed([0.4] * 4))
    assert result.steps[0].actuators["u"] > 0.3
    assert cold_result.steps[0].actuators["u"] == 0.0


async def test_high_control_effort_turns_on_strict_decoding_and_heavy_rigour() -> None:
    store = MemoryStore()
    await store.record_put("control", "propose:react", {"errors": [1.0] * 6})
    model = scripted(call("add", a=1, b=2), final("3"))
    agent, _ = make_agent(model, [add], runtime=Runtime(store=store))
    result = await agent.run("1+2")
    first = model.calls[0]
    assert first.response_schema is not None
    # before any tool has answered, the grammar offers the tool alone: no answer branch
    tool_variant = first.response_schema
    assert "oneOf" not in tool_variant and "final" not in tool_variant["properties"]
    assert tool_variant["properties"]["tool"] == {"const": "add"}
    assert tool_variant["properties"]["arguments"]["required"] == ["a", "b"]  # full schema
    assert "Current rigour: 1.00 (heavy)" in system_of(model, 0)
    assert "exactly one JSON object" in system_of(model, 0)
    assert result.steps[0].actuators["constrained_decoding"] is True
    assert result.steps[0].actuators["model_u"] == pytest.approx(_replayed([1.0] * 6))
    # a valid proposal lowers the effort; the next call is looser
    assert result.steps[1].actuators["model_u"] < result.steps[0].actuators["model_u"]


async def test_low_control_effort_decodes_loosely_with_light_rigour() -> None:
    model = scripted(call("add", a=1, b=2), final("3"))
    agent, _ = make_agent(model, [add])
    await agent.run("1+2")
    assert model.calls[0].response_schema is None
    assert "Current rigour: 0.00 (light)" in system_of(model, 0)


async def test_the_tool_actuators_follow_that_tools_controller(clock: FakeClock) -> None:
    attempts: list[int] = []

    async def shaky(n: int) -> int:
        """Fails on its first attempt of every call."""
        attempts.append(n)
        if len(attempts) % 2 == 1:
            raise ConnectionError("reset by peer")
        return n

    store = MemoryStore()
    await store.record_put("control", "shaky", {"errors": [1.0, 1.0, 1.0]})
    model = scripted(call("shaky", n=1), final("1"))
    agent, _ = make_agent(
        model, [shaky], runtime=Runtime(clock=clock, sleep=clock.sleep, store=store)
    )
    result = await agent.run("go")
    step = result.steps[0]
    assert step.actuators["max_retries"] == 1 and step.actuators["timeout_ms"] > 10_000
    assert step.observation is not None and step.observation["status"] == "ok"
    assert attempts == [1, 1]  # retried once, as the actuator allowed
    delay = step.actuators["retry_delay_ms"] / 1000.0
    assert delay in clock.slept

    cold_model = scripted(call("shaky", n=2), final("2"))
    cold, _ = make_agent(cold_model, [shaky], runtime=Runtime(clock=clock, sleep=clock.sleep))
    cold_result = await cold.run("go")
    assert cold_result.steps[0].actuators["max_retries"] == 0
    assert cold_result.steps[0].observation["status"] == "error"


async def test_a_pluggable_metric_sets_the_step_error() -> None:
    def weather(city: str) -> dict[str, Any]:
        """Weather by city; this one mishears the name."""
        return {"city": "Pari", "temperature_c": 18.5}

    config = ControlConfig(metrics={"weather": edit_distance_metric("city", "city")})
    model = scripted(call("weather", city="Paris"), final("18.5"))
    agent, _ = make_agent(model, [weather], control=config)
    result = await agent.run("Weather in Paris?")
    step = result.steps[0]
    assert step.error == pytest.approx(1 / 5)
    p, i, d = step.pid_components
    assert step.control == pytest.approx(p + i + d)
    assert p == pytest.approx(0.8 * 0.2)
    assert step.quality == pytest.approx(0.8)


async def test_every_control_signal_is_in_the_record_and_lyapunov_tracks_quality() -> None:
    model = scripted(call("add", a=1, b=1), call("add", a=2, b=2), final("4"))
    agent, _ = make_agent(model, [add])
    result = await agent.run("sum")
    for record in result.steps:
        assert record.lyapunov_v is not None and 0.0 <= record.lyapunov_v <= 0.5
        assert record.protocol == "normal" and record.f_est == 0.0
        assert {"u", "strictness", "timeout_ms", "retry_delay_ms", "max_retries"} <= set(
            record.actuators
        )
        assert record.actuators["model"] == "scripted"
    assert result.steps[0].lyapunov_dv is None and result.steps[1].lyapunov_dv is not None


async def test_the_eso_raises_the_protocol_as_quality_drops() -> None:
    confidences = iter([0.9, 0.5, 0.2, 0.1])

    def sensor(reading: int) -> Observation:
        """A sensor that degrades."""
        return Observation.ok({"reading": reading}, source="sensor", confidence=next(confidences))

    config = ControlConfig(
        eso_min_samples=1, protocol_thresholds=(0.3, 0.6, 0.95), hysteresis=0.0, protocol_dwell=0
    )

    def reply(messages: tuple[Message, ...], info: CallInfo) -> dict[str, Any]:
        # Deterministic in the projected state, so two samples of a step agree.
        step = int(re.search(r"step (\d+) of", messages[-1].content).group(1))  # type: ignore[union-attr]
        return call("sensor", reading=step) if step <= 3 else final("x")

    model = FunctionModel(reply)
    agent, _ = make_agent(
        model,
        [sensor],
        control=config,
        limits=RunLimits(stop=stop_on_no_progress(9) | stop_on_repeats(2)),
    )
    result = await agent.run("read the sensor")
    steps = result.steps[:3]
    assert [r.quality for r in steps] == pytest.approx([0.9, 0.5, 0.2])
    # the ESO sees (effort applied, setpoint, quality) of every step, in order
    eso = RegressionESO(window=15, min_samples=1)
    expected = [eso.update(r.actuators["u"], 1.0, r.quality) for r in steps]
    assert [r.f_est for r in steps] == pytest.approx(expected)
    assert expected[0] == pytest.approx(0.1) and expected[0] < expected[1] < expected[2]
    assert [r.protocol for r in steps] == [
        select_protocol(f, (0.3, 0.6, 0.95)).value for f in expected
    ]
    assert steps[-1].protocol != "normal"


def test_rigour_text_has_three_levels() -> None:
    schedule = ActuatorSchedule()
    assert "(light)" in rigour_instruction(schedule(0.1))
    assert "(medium)" in rigour_instruction(schedule(0.4))
    heavy = rigour_instruction(schedule(0.9))
    assert "(heavy)" in heavy and "not 'no constraint'" in heavy and "JSON object" in heavy


@pytest.mark.parametrize(
    "options",
    [
        {"kp": -1.0},
        {"history_window": 0},
        {"eso_min_samples": 0},
        {"eso_window": 2, "eso_min_samples": 5},
        {"protocol_thresholds": (0.5, 0.4, 0.9)},
        {"setpoint": 1.5},
        {"namespace": ""},
        {"schedule": "fast"},
    ],
)
def test_bad_control_settings_name_themselves(options: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        ControlConfig(**options)


def test_protocols_can_be_switched_off() -> None:
    agent = Agent(
        scripted(final("x")),
        [add],
        control=ControlConfig(protocols=False),
        runtime=Runtime(trace=False),
    )
    assert agent.settings.control.protocols is False
    assert HaltReason.FINAL.value == "final"
