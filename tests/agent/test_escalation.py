"""Spending only when unsure: adaptive votes, a cascade that escalates before executing,
and the risk controller's threshold fed back and kept across sessions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from closedloop import ConfigurationError
from closedloop.agent import ControlConfig, RiskControl, Runtime, Sampling
from closedloop.control import ActuatorSchedule, BetaStop, FixedVotes, WindowStop, schedule_votes
from closedloop.feedback import MemoryStore, SQLiteStore, ThresholdStates
from closedloop.models import CallInfo, FunctionModel, Message

from .conftest import Adder, answered, call, final, make_agent


def _votes(k: int) -> ActuatorSchedule:
    return ActuatorSchedule(votes=schedule_votes(0.9, k, k))


def _steady(name: str = "steady") -> FunctionModel:
    """Always the same call, then the answer: its samples always agree."""

    def reply(messages: tuple[Message, ...], info: CallInfo) -> dict[str, Any]:
        return final("5") if answered(messages) else call("add", a=2, b=3)

    return FunctionModel(reply, name=name)


def _split(pattern: tuple[int, ...], name: str = "weak") -> FunctionModel:
    """Calls add(2, b) with b cycling through ``pattern``, one per sample; answers once
    it has seen a result."""
    count = [0]

    def reply(messages: tuple[Message, ...], info: CallInfo) -> dict[str, Any]:
        if answered(messages):
            return final("5")
        b = pattern[count[0] % len(pattern)]
        count[0] += 1
        return call("add", a=2, b=b)

    return FunctionModel(reply, name=name)


# --- adaptive votes -------------------------------------------------------------------------


async def test_without_a_stop_rule_the_scheduled_votes_are_all_drawn() -> None:
    model, adder = _steady(), Adder()
    agent, _ = make_agent(model, [adder.add], control=ControlConfig(schedule=_votes(5)))
    result = await agent.run("What is 2 + 3?")
    assert result.success, result.message
    assert [s.actuators["model_votes"] for s in result.steps] == [5, 5]
    assert all("sampling" not in s.actuators for s in result.steps)


async def test_a_window_stop_ends_an_agreeing_vote_after_two_samples() -> None:
    model, adder = _steady(), Adder()
    sampling = Sampling(stop=WindowStop(window=2, max_samples=5))
    control = ControlConfig(schedule=_votes(5), sampling=sampling)
    agent, _ = make_agent(model, [adder.add], control=control)
    result = await agent.run("What is 2 + 3?")
    assert result.success, result.message
    assert [s.actuators["model_votes"] for s in result.steps] == [2, 2]
    assert len(model.calls) == 4 and adder.ran == [(2, 3)]


async def test_a_disputed_vote_draws_up_to_the_rules_budget() -> None:
    model, adder = _split((3, 4)), Adder()
    control = ControlConfig(sampling=Sampling(stop=BetaStop(threshold=0.95, max_samples=5)))
    agent, _ = make_agent(model, [adder.add], control=control)
    result = await agent.run("What is 2 + 3?")
    # 3, 4, 3, 4, 3: the budget ends it, and three of five carry add(2, 3).
    assert result.steps[0].actuators["model_votes"] == 5
    assert adder.ran[0] == (2, 3)


def test_a_rule_that_never_stops_early_draws_the_same_samples() -> None:
    def seeds(control: ControlConfig) -> list[tuple[int | None, float]]:
        model = _steady()
        agent, _ = make_agent(model, [Adder().add], control=control)
        agent.run_sync("What is 2 + 3?")
        return [(c.request.seed, c.request.temperature) for c in model.calls]

    at_once = seeds(ControlConfig(schedule=_votes(3)))
    one_by_one = seeds(ControlConfig(sampling=Sampling(stop=FixedVotes(k=3))))
    assert sorted(at_once, key=str) == sorted(one_by_one, key=str)
    assert len(at_once) == 6


# --- the cascade ----------------------------------------------------------------------------


async def test_a_weak_model_that_disagrees_with_itself_escalates_before_executing() -> None:
    weak, strong, adder = _split((100, 100, 101)), _steady("strong"), Adder()
    sampling = Sampling(stop=FixedVotes(k=3), escalate_below=0.9)
    agent, _ = make_agent([weak, strong], [adder.add], control=ControlConfig(sampling=sampling))
    result = await agent.run("What is 2 + 3?")
    assert result.success, result.message
    # The weak majority (2 of 3 on add(2, 100)) was below 0.9: it never ran.
    assert adder.ran == [(2, 3)]
    assert len(weak.calls) >= 3
    first = result.steps[0]
    assert first.actuators["model"] == "strong"
    reading = first.actuators["sampling"]
    assert reading["escalations"] == 1 and reading["accepted"] is False
    assert reading["rungs"][0]["score"] == pytest.approx(2 / 3)
    assert [r["model"] for r in reading["rungs"]] == ["weak", "strong"]
    spent = {r.model: r.model_calls for r in first.usage.rungs}
    assert spent == {"weak": 3, "strong": 3}
    assert first.usage.model_calls == 6


async def test_without_the_cascade_the_weak_majority_runs() -> None:
    weak, strong, adder = _split((100, 100, 101)), _steady("strong"), Adder()
    sampling = Sampling(stop=FixedVotes(k=3))
    agent, _ = make_agent([weak, strong], [adder.add], control=ControlConfig(sampling=sampling))
    await agent.run("What is 2 + 3?")
    assert adder.ran[0] == (2, 100)


async def test_an_agreeing_weak_model_is_accepted_and_the_strong_one_never_asked() -> None:
    weak, strong, adder = _steady("weak"), _steady("strong"), Adder()
    sampling = Sampling(stop=WindowStop(window=2), escalate_below=0.9)
    agent, _ = make_agent([weak, strong], [adder.add], control=ControlConfig(sampling=sampling))
    result = await agent.run("What is 2 + 3?")
    assert result.success and strong.calls == []
    assert all(s.actuators["sampling"]["accepted"] for s in result.steps)


# --- the risk controller ---------------------------------------------------------------------


def _risky(store: Any, weak: FunctionModel, strong: FunctionModel) -> Any:
    risk = RiskControl(alpha=0.1, ki=0.1, start=0.5)
    sampling = Sampling(stop=FixedVotes(k=3), risk=risk)
    agent, _ = make_agent(
        [weak, strong],
        [Adder().add],
        control=ControlConfig(sampling=sampling),
        runtime=Runtime(store=store),
    )
    return agent


async def test_feedback_raises_the_threshold_and_it_carries_to_a_new_agent(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state.db"
    store = SQLiteStore(path)
    weak, strong = _split((3, 3, 4)), _steady("strong")
    agent = _risky(store, weak, strong)
    first = await agent.run("What is 2 + 3?")
    # 2 of 3 agree (0.67) above the starting threshold 0.5: accepted on the weak rung.
    assert first.steps[0].actuators["sampling"]["accepted"] is True
    assert strong.calls == []
    thresholds: dict[str, float] = {}
    for _ in range(3):  # three wrong answers in a row: tau = 0.5 + 0.1 * 0.9 * n
        thresholds = await agent.feedback(first, ok=False)
    assert thresholds["weak/add"] == pytest.approx(0.5 + 3 * 0.09)
    await store.close()

    again = SQLiteStore(path)  # another session, another agent, the same store
    weak2, strong2 = _split((3, 3, 4)), _steady("strong")
    second = await _risky(again, weak2, strong2).run("What is 2 + 3?")
    reading = second.steps[0].actuators["sampling"]
    assert reading["rungs"][0]["threshold"] == pytest.approx(0.77)
    assert reading["escalations"] == 1 and second.steps[0].actuators["model"] == "strong"
    assert strong2.calls != []
    stored = await ThresholdStates(again).get("weak/add")
    assert stored is not None and stored["steps"] == 3 and stored["errors"] == 3
    await again.close()


async def test_right_answers_lower_the_threshold_and_escalated_calls_do_not_count() -> None:
    store = MemoryStore()
    agent = _risky(store, _steady("weak"), _steady("strong"))
    result = await agent.run("What is 2 + 3?")
    out = await agent.feedback(result, ok=True)
    assert out["weak/add"] == pytest.approx(0.5 - 0.1 * 0.1)
    # A run whose every call was escalated gives the controller nothing to learn from.
    stepless = [s.model_copy(update={"actuators": {**s.actuators, "sampling": {
        **s.actuators["sampling"], "accepted": False}}}) for s in result.steps]  # fmt: skip
    assert await agent.feedback(stepless, ok=False) == {}


async def test_feedback_needs_a_risk_controller() -> None:
    agent, _ = make_agent(_steady(), [Adder().add])
    result = await agent.run("What is 2 + 3?")
    with pytest.raises(ConfigurationError, match="risk"):
        await agent.feedback(result, ok=False)
    risky = _risky(MemoryStore(), _steady("weak"), _steady("strong"))
    with pytest.raises(ConfigurationError, match="ok=1"):
        await risky.feedback(result, ok=1)


async def test_threshold_states_update_by_compare_and_set() -> None:
    store = MemoryStore()
    states = ThresholdStates(store, "t")
    assert await states.get("a/b") is None

    def bump(current: dict[str, Any] | None) -> dict[str, Any]:
        return {"n": (0 if current is None else current["n"]) + 1}

    await states.update("a/b", bump)
    await states.update("a/b", bump)
    assert await states.get("a/b") == {"n": 2}
    record = await store.record_get("t", "a/b")
    assert record is not None and record.version == 2
    json.dumps(record.to_dict())


def test_bad_sampling_settings_are_named() -> None:
    with pytest.raises(ConfigurationError, match="escalate_below"):
        Sampling(escalate_below=1.5)
    with pytest.raises(ConfigurationError, match="stop"):
        Sampling(stop=3)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="alpha"):
        RiskControl(alpha=2.0)
    with pytest.raises(ConfigurationError, match="sampling"):
        ControlConfig(sampling=None)  # type: ignore[arg-type]
