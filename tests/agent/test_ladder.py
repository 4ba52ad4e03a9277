"""The model ladder (a cascade climbed by the measured error) and votes over samples."""

from __future__ import annotations

from typing import Any

import pytest

from closedloop import ConfigurationError
from closedloop.agent import ControlConfig, ModelSettings, Runtime
from closedloop.agent._actions import Proposal
from closedloop.agent._protocols import vote
from closedloop.agent._records import ActionCall, RungUsage, RunUsageSummary
from closedloop.control import ActuatorSchedule, schedule_votes
from closedloop.models import CallInfo, FunctionModel, Message, ModelLadder, Rung

from .conftest import FakeClock, add, call, final, make_agent

ONE_VOTE = ControlConfig(schedule=ActuatorSchedule(votes=schedule_votes(0.9, 1, 1)))


def _weak() -> FunctionModel:
    """A cheap model that never manages a valid action."""
    return FunctionModel(lambda m, c: "I am not sure what to do here.", name="weak")


def _strong(clock: FakeClock | None = None, seconds: float = 0.0) -> FunctionModel:
    """A stronger model: calls ``add`` until it has seen a result, then answers."""

    def reply(messages: tuple[Message, ...], info: CallInfo) -> dict[str, Any]:
        if clock is not None:
            clock.advance(seconds)
        if '"result"' in messages[-1].content or "5.0" in messages[-1].content:
            return final("5")
        return call("add", a=2, b=3)

    return FunctionModel(reply, name="strong")


async def test_a_refused_reply_climbs_the_ladder_and_a_calm_step_comes_back_down() -> None:
    weak, strong = _weak(), _strong()
    agent, _ = make_agent([weak, strong], [add], control=ONE_VOTE)
    result = await agent.run("What is 2 + 3?")
    assert result.success, result.message
    rungs = [s.actuators["model_rung"] for s in result.steps]
    models = [s.actuators["model"] for s in result.steps]
    # weak refused → strong calls add (accepted: error 0) → back to weak → strong answers
    assert rungs == [0, 1, 0, 1]
    assert models == ["weak", "strong", "weak", "strong"]
    assert len(weak.calls) == 2 and len(strong.calls) == 2


async def test_a_single_model_stays_on_rung_zero_whatever_u_says() -> None:
    weak = _weak()
    agent, _ = make_agent(weak, [add], control=ONE_VOTE)
    result = await agent.run("What is 2 + 3?")
    assert not result.success
    assert {s.actuators["model_rung"] for s in result.steps} == {0}
    assert result.steps[-1].actuators["model_u"] > 0.5  # it would have climbed, if it could
    assert [r.model for r in result.usage.rungs] == ["weak"]


async def test_cost_per_rung_is_in_the_result(clock: FakeClock) -> None:
    strong = _strong(clock, seconds=0.5)
    ladder = ModelLadder.of([_weak(), strong], prices=[None, 2.0])
    agent, _ = make_agent(
        ladder, [add], control=ONE_VOTE, runtime=Runtime(clock=clock, sleep=clock.sleep)
    )
    result = await agent.run("What is 2 + 3?")
    low, high = result.usage.rungs
    assert (low.rung, low.model, low.model_calls) == (0, "weak", 2)
    assert (high.rung, high.model, high.model_calls) == (1, "strong", 2)
    assert high.seconds == pytest.approx(1.0) and low.seconds == 0.0
    assert high.prompt_tokens > 0 and high.completion_tokens > 0
    tokens = high.prompt_tokens + high.completion_tokens
    assert high.cost == pytest.approx(2.0 * tokens / 1000) and low.cost == 0.0
    assert result.usage.model_calls == low.model_calls + high.model_calls
    assert result.usage.cost == pytest.approx(high.cost)
    assert result.steps[1].usage.rungs[0].rung == 1


def test_usage_totals_add_up_rung_by_rung() -> None:
    a = RungUsage(rung=0, model="m", model_calls=1, prompt_tokens=3, seconds=0.5)
    b = RungUsage(rung=1, model="n", model_calls=2, completion_tokens=4, cost=0.1)
    total = RunUsageSummary.total(
        [RunUsageSummary(model_calls=1, rungs=[a]), RunUsageSummary(model_calls=2, rungs=[b, a])]
    )
    assert total.model_calls == 3
    assert [(r.rung, r.model_calls, r.prompt_tokens) for r in total.rungs] == [(0, 2, 6), (1, 2, 0)]
    assert total.rungs[0].seconds == pytest.approx(1.0)


def _tool(name: str, **arguments: Any) -> Proposal:
    return Proposal("tool", call=ActionCall(tool=name, arguments=arguments))


def test_the_vote_picks_the_majority_normalised_call() -> None:
    samples = [
        _tool("book", room="A", day="Fri"),
        _tool("book", room="B", day="Fri"),
        _tool("book", day=" fri", room="b"),  # the same call as the second, normalised
    ]
    voted = vote(samples)
    assert voted.proposal is samples[1]
    assert (voted.support, voted.samples) == (2, 3)
    assert voted.disagreement == pytest.approx(1 / 3)
    assert vote(samples[:1]).disagreement == 0.0
    assert vote([samples[0], samples[0]]).disagreement == 0.0


def test_a_vote_never_empties_a_call_and_counts_invalid_samples_against_it() -> None:
    one, other = _tool("book", room="A", day="Fri"), _tool("book", room="B", day="Fri")
    tie = vote([one, other])
    assert tie.proposal.kind == "invalid" and tie.proposal.call is None  # asked again
    assert "no majority" in tie.proposal.errors[0] and "asked again" in tie.note
    assert tie.disagreement == pytest.approx(0.5)
    three = vote([one, other, _tool("book", room="C", day="Fri")])
    assert three.proposal.kind == "invalid" and three.support == 1
    invalid = Proposal("invalid", errors=("not JSON",))
    assert vote([invalid, other, other]).proposal is other
    assert vote([invalid, other, other]).disagreement == pytest.approx(1 / 3)
    outvoted = vote([invalid, other, invalid])  # invalid samples count against the call
    assert outvoted.proposal.kind == "invalid" and outvoted.disagreement == pytest.approx(2 / 3)
    nothing = vote([invalid, invalid])
    assert nothing.proposal.kind == "invalid" and nothing.disagreement == 1.0
    final_a = Proposal("final", answer="ok", fields={"a": 1})
    assert vote([final_a, Proposal("final", answer="OK ", fields={"a": 1.0})]).support == 2


def _voting(rooms: list[str]) -> tuple[FunctionModel, list[float]]:
    """A model whose k samples of the booking step name ``rooms`` (one per sample, by
    seed order); it records the temperatures it was asked at."""
    temperatures: list[float] = []

    def reply(messages: tuple[Message, ...], info: CallInfo) -> dict[str, Any]:
        text = messages[-1].content
        temperatures.append(info.temperature)
        if "B1" in text:
            return final("booked")
        index = ((info.seed or 0) // 7919) % len(rooms)
        return call("book", room=rooms[index], day="Fri")

    return FunctionModel(reply), temperatures


def _book(booked: list[dict[str, str]]) -> Any:
    def book(room: str, day: str) -> str:
        """Book a room."""
        booked.append({"room": room, "day": day})
        return "B1"

    return book


THREE_VOTES = ControlConfig(schedule=ActuatorSchedule(votes=schedule_votes(0.0, 3, 3)))


async def test_votes_run_the_majority_call_at_a_raised_temperature() -> None:
    model, temperatures = _voting(["A", "B", "B"])
    booked: list[dict[str, str]] = []
    agent, _ = make_agent(
        model,
        [_book(booked)],
        control=THREE_VOTES,
        model_settings=ModelSettings(dual_temperature=0.9),
    )
    result = await agent.run("Book a room on Friday.")
    assert result.success, result.message
    assert booked == [{"room": "B", "day": "Fri"}]
    first = result.steps[0]
    assert first.actuators["model_votes"] == 3 and first.usage.model_calls == 3
    assert sorted(temperatures[:3]) == [0.0, 0.9, 0.9]
    assert any("2 of 3 samples agree" in n for n in first.notes)


async def test_disagreement_is_a_measured_error_of_the_proposal() -> None:
    async def model_u_after_first_step(rooms: list[str]) -> float:
        model, _ = _voting(rooms)
        agent, _ = make_agent(model, [_book([])], control=THREE_VOTES)
        result = await agent.run("Book a room on Friday.")
        assert result.success, result.message
        return float(result.steps[1].actuators["model_u"])

    agreeing = await model_u_after_first_step(["A", "A", "A"])
    split = await model_u_after_first_step(["A", "B", "B"])
    assert agreeing == 0.0
    assert split > agreeing


def test_bad_ladders_are_named_before_any_model_call(tmp_path: Any) -> None:
    first = _weak()
    with pytest.raises(ConfigurationError, match=r"model\[1\]='local:no-such-model'"):
        make_agent([first, "local:no-such-model"], [add])
    with pytest.raises(ConfigurationError, match=r"model\[0\]='nonsense'"):
        make_agent(["nonsense", first], [add])
    missing = tmp_path / "absent.gguf"
    with pytest.raises(ConfigurationError, match=r"model\[1\]=.*the rung cannot be loaded"):
        make_agent([first, f"local:{missing}"], [add])
    corrupt = tmp_path / "corrupt.gguf"
    corrupt.write_bytes(b"not a model")
    with pytest.raises(ConfigurationError, match=r"model\[1\]=.*is not a GGUF model file"):
        make_agent([first, f"local:{corrupt}"], [add])
    with pytest.raises(ConfigurationError, match=r"model\[1\]=3"):
        make_agent([first, 3], [add])
    with pytest.raises(ConfigurationError, match=r"model=\[\]"):
        make_agent([], [add])
    with pytest.raises(ConfigurationError, match=r"prices="):
        ModelLadder.of([first], prices=[1.0, 2.0])
    with pytest.raises(ConfigurationError, match=r"prices\[0\]=-1"):
        ModelLadder.of([first], prices=[-1.0])
    with pytest.raises(ConfigurationError, match=r"model\[0\]\.price=nan"):
        ModelLadder.of([Rung(first, float("nan"))])
    assert first.calls == []
