"""The defence protocols inside the loop: dual verification and dimension reduction."""

from __future__ import annotations

from typing import Any

import pytest

from closedloop.agent import (
    ContextSettings,
    ControlConfig,
    HaltReason,
    ModelSettings,
    RunLimits,
    Task,
    tool,
)
from closedloop.agent._actions import Proposal
from closedloop.agent._protocols import intersect, proposal_confidence, vote
from closedloop.agent._records import ActionCall
from closedloop.models import CallInfo, Completion, Confidence, FunctionModel, Message
from closedloop.perception import Observation

from .conftest import call, final, make_agent


def test_intersect_keeps_only_what_both_sides_agree_on() -> None:
    a = {"date": "2024-05-03", "room": "A", "who": {"name": "Li", "count": 3}, "x": 1}
    b = {"date": "2024-05-03 ", "room": "B", "who": {"name": "li", "count": 4}, "y": 2}
    kept, dropped = intersect(a, b)
    assert kept == {"date": "2024-05-03", "who": {"name": "Li"}}
    assert sorted(dropped) == ["room", "who.count", "x", "y"]


def test_the_vote_replaces_keeping_only_agreed_arguments() -> None:
    one = Proposal("tool", call=ActionCall(tool="book", arguments={"room": "A", "day": "Fri"}))
    two = Proposal("tool", call=ActionCall(tool="book", arguments={"room": "B", "day": "Fri"}))
    voted = vote([one, two])
    assert voted.proposal.kind == "invalid" and voted.proposal.call is None  # never emptied
    assert voted.disagreement == 0.5
    assert vote([one, two, one]).proposal is one
    assert vote([one, Proposal("final", answer="x")]).proposal.kind == "invalid"
    f1 = Proposal("final", answer="ok", fields={"a": 1, "b": 2})
    f2 = Proposal("final", answer="OK!", fields={"a": 1, "b": 3})
    assert vote([f1, f2, f1]).proposal.fields == {"a": 1, "b": 2}


def _shaky_sensor(confidence: float) -> Any:
    def sensor(reading: int) -> Observation:
        """A sensor whose answers are only partly trusted."""
        return Observation.ok({"reading": reading}, source="sensor", confidence=confidence)

    return sensor


DUAL = ControlConfig(eso_min_samples=1, protocol_thresholds=(0.3, 0.9, 0.99), hysteresis=0.0)
REDUCE = ControlConfig(
    eso_min_samples=1, protocol_thresholds=(0.1, 0.15, 0.99), hysteresis=0.0, protocol_dwell=0
)


async def test_dual_verification_asks_again_when_the_two_samples_disagree() -> None:
    seeds: list[tuple[int | None, float]] = []

    def reply(messages: tuple[Message, ...], info: CallInfo) -> dict[str, Any]:
        seeds.append((info.seed, info.temperature))
        text = messages[-1].content
        if "step 1 of" in text:
            return call("sensor", reading=1)
        second_sample = info.temperature > 0.0
        if "step 2 of" in text and second_sample:  # the samples disagree on the room
            return final("Room booked", date="2024-05-03", room="B", attendees=3)
        return final("Room booked", date="2024-05-03", room="A", attendees=3)

    task = Task(prompt="Book a room for 3 on 3 May.", required_fields=["date", "room", "attendees"])
    model = FunctionModel(reply)
    agent, _ = make_agent(model, [_shaky_sensor(0.5)], control=DUAL)
    result = await agent.run(task)
    step2 = result.steps[1]
    assert step2.protocol == "dual_verification" and step2.usage.model_calls == 2
    assert "no majority (1 of 2" in step2.validation_errors[0]  # nothing ran: asked again
    assert len({s for s, _ in seeds[1:3]}) == 2  # a second sample with another seed
    assert result.success and result.fields == {"date": "2024-05-03", "room": "A", "attendees": 3}
    assert result.steps[2].usage.model_calls == 2  # asked again, and the samples agreed


async def test_dual_verification_can_ask_a_second_model_and_never_empties_a_call() -> None:
    def primary(messages: tuple[Message, ...], info: CallInfo) -> dict[str, Any]:
        if "step 1 of" in messages[-1].content:
            return call("sensor", reading=1)
        return call("book", room="A", day="Fri")

    def verifier(messages: tuple[Message, ...], info: CallInfo) -> dict[str, Any]:
        return call("book", room="B", day="Fri")

    booked: list[str] = []

    def book(room: str, day: str) -> str:
        """Book a room."""
        booked.append(room)
        return "B1"

    second = FunctionModel(verifier, name="verifier")
    agent, _ = make_agent(
        FunctionModel(primary),
        [_shaky_sensor(0.5), book],
        control=DUAL,
        limits=RunLimits(max_steps=2),
        model_settings=ModelSettings(verifier=second),
    )
    result = await agent.run("Book a room on Friday.")
    assert len(second.calls) == 1 and booked == []
    refused = result.steps[1]
    assert refused.action is None  # no call with its disputed arguments emptied
    assert "samples disagreed" in refused.validation_errors[0]
    assert result.halt_reason is HaltReason.STEP_LIMIT


async def test_dimension_reduction_skips_non_core_tools_and_returns_the_plain_result() -> None:
    charts: list[str] = []

    @tool(core=False)
    def render_chart(title: str) -> str:
        """Draw a chart (nice to have)."""
        charts.append(title)
        return "chart.png"

    def reply(messages: tuple[Message, ...], info: CallInfo) -> dict[str, Any]:
        text = messages[-1].content
        if "step 1 of" in text:
            return call("sensor", reading=7)
        if "step 2 of" in text:
            return call("render_chart", title="readings")
        return final("reading is 7")

    model = FunctionModel(reply)
    agent, _ = make_agent(
        model,
        [_shaky_sensor(0.5), render_chart],
        control=REDUCE,
        context=ContextSettings(
            format_answer=lambda answer, fields: f"## Report\n\n{answer}\n\n![chart](chart.png)"
        ),
    )
    result = await agent.run("Report the reading with a chart.")
    assert charts == []
    skipped = result.steps[1]
    assert skipped.protocol == "dimension_reduction"
    assert "render_chart is not a core step and was skipped" in skipped.notes[0]
    assert "- render_chart" not in model.calls[1].messages[0].content  # hidden from the model
    assert result.success and result.answer == "reading is 7"  # formatting skipped
    assert "plain result" in " ".join(result.steps[-1].notes)


async def test_without_a_disturbance_the_non_core_parts_run() -> None:
    charts: list[str] = []

    @tool(core=False)
    def render_chart(title: str) -> str:
        """Draw a chart (nice to have)."""
        charts.append(title)
        return "chart.png"

    def reply(messages: tuple[Message, ...], info: CallInfo) -> dict[str, Any]:
        text = messages[-1].content
        if "step 1 of" in text:
            return call("sensor", reading=7)
        if "step 2 of" in text:
            return call("render_chart", title="readings")
        return final("reading is 7")

    agent, _ = make_agent(
        FunctionModel(reply),
        [_shaky_sensor(1.0), render_chart],
        control=REDUCE,
        context=ContextSettings(format_answer=lambda answer, fields: f"## Report\n\n{answer}"),
    )
    result = await agent.run("Report the reading with a chart.")
    assert charts == ["readings"]
    assert result.answer == "## Report\n\nreading is 7"


@pytest.mark.parametrize("protocols", [True, False])
async def test_protocols_off_keeps_the_loop_at_normal(protocols: bool) -> None:
    config = ControlConfig(
        eso_min_samples=1, protocol_thresholds=(0.1, 0.2, 0.99), hysteresis=0.0, protocols=protocols
    )

    def reply(messages: tuple[Message, ...], info: CallInfo) -> dict[str, Any]:
        return call("sensor", reading=1) if "step 1 of" in messages[-1].content else final("1")

    agent, _ = make_agent(FunctionModel(reply), [_shaky_sensor(0.5)], control=config)
    result = await agent.run("read")
    assert (result.steps[1].protocol == "normal") is (not protocols)


def test_proposal_confidence_reads_agreement_margin_and_the_winners_logprobs() -> None:
    def completion(low: float) -> Completion:
        conf = Confidence(decision_tokens=1, logprob_mean=low, logprob_min=low, logprob_low=low)
        return Completion(text="", model="m", call_id="c", confidence=conf)

    a = Proposal("tool", call=ActionCall(tool="add", arguments={"a": 1}))
    a_again = Proposal("tool", call=ActionCall(tool="add", arguments={"a": 1.0}))
    b = Proposal("tool", call=ActionCall(tool="sub", arguments={}))
    sensed = proposal_confidence(
        [b, a, a_again], [completion(-3.0), completion(-0.5), completion(-1.0)]
    )
    assert sensed.samples == 3
    assert sensed.agreement == pytest.approx(2 / 3)
    assert sensed.margin == pytest.approx(1 / 3)
    assert sensed.logprob_min == -0.5  # the first sample making the majority call
    single = proposal_confidence([a], [completion(-0.2)])
    assert single.agreement is None and single.logprob_low == -0.2
