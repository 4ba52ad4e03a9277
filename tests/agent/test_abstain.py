"""Read before acting: abstaining when the first call is unsure, votes weighed by the
samples' confidence, and logprobs asked for where the model gives them."""

from __future__ import annotations

import json
import math
import re
from typing import Any

import pytest

from closedloop import ConfigurationError
from closedloop.agent import ControlConfig, HaltReason, ModelSettings, Runtime, Sampling
from closedloop.control import ActuatorSchedule, schedule_votes
from closedloop.feedback import HandoverQueue, MemoryStore
from closedloop.models import CallInfo, FunctionModel, Message, RawCompletion

from .conftest import Adder, answered, call, final, make_agent


def _said(reply: dict[str, Any], p: float) -> RawCompletion:
    """``reply`` as JSON text whose every token has probability ``p``."""
    text = json.dumps(reply)
    pieces = re.findall(r"\w+|[^\w]", text)
    return RawCompletion(text=text, logprobs=tuple((t, math.log(p)) for t in pieces))


def _caller(*confidences: float, bs: tuple[int, ...] = (3,)) -> FunctionModel:
    """Calls add(2, b) with the confidences (and b values) in turn, one per sample, then
    answers once it has seen a result."""
    count = [0]

    def reply(messages: tuple[Message, ...], info: CallInfo) -> RawCompletion:
        if answered(messages):
            return _said(final("done"), 0.99)
        i = count[0]
        count[0] += 1
        return _said(call("add", a=2, b=bs[i % len(bs)]), confidences[i % len(confidences)])

    return FunctionModel(reply)


async def test_an_unsure_first_call_is_not_run_and_the_run_abstains() -> None:
    adder = Adder()
    control = ControlConfig(sampling=Sampling(abstain_below=0.4))
    agent, _ = make_agent(_caller(0.2), [adder.add], control=control)
    result = await agent.run("What is 2 + 3?")
    assert result.halt_reason is HaltReason.ABSTAINED and not result.success
    assert result.answer == Sampling().abstain_answer
    assert adder.ran == []  # nothing executed
    assert "below 0.4" in " ".join(result.steps[0].notes)


async def test_a_sure_first_call_runs_and_without_a_floor_nothing_abstains() -> None:
    for confidence, sampling in ((0.9, Sampling(abstain_below=0.4)), (0.2, Sampling())):
        adder = Adder()
        control = ControlConfig(sampling=sampling)
        agent, _ = make_agent(_caller(confidence), [adder.add], control=control)
        result = await agent.run("What is 2 + 3?")
        assert result.halt_reason is HaltReason.FINAL and adder.ran == [(2, 3)]


async def test_with_a_floor_an_unsure_first_sample_needs_no_more_samples() -> None:
    from closedloop.control import ConfidenceStop

    model, adder = _caller(0.2), Adder()
    stop = ConfidenceStop(threshold=0.8, max_samples=3)
    control = ControlConfig(sampling=Sampling(stop=stop, abstain_below=0.4))
    agent, _ = make_agent(model, [adder.add], control=control)
    result = await agent.run("What is 2 + 3?")
    assert result.halt_reason is HaltReason.ABSTAINED and len(model.calls) == 1


async def test_an_unsure_first_call_can_go_to_a_person_instead() -> None:
    adder, store = Adder(), MemoryStore()
    control = ControlConfig(sampling=Sampling(abstain_below=0.4, unsure="handover"))
    runtime = Runtime(store=store)
    agent, _ = make_agent(_caller(0.2), [adder.add], control=control, runtime=runtime)
    frozen = await agent.run("What is 2 + 3?")
    assert frozen.halt_reason is HaltReason.HANDOVER and frozen.handover_id is not None
    assert adder.ran == []  # nothing executed before the person decides
    item = await HandoverQueue(store).get(frozen.handover_id)
    assert "below 0.4" in json.dumps(item.audit)  # the person sees why
    await HandoverQueue(store).decide(frozen.handover_id, "approve")
    resumed = await agent.resume(frozen.handover_id)
    assert resumed.success and adder.ran == [(2, 3)]  # the approved call ran, once


def test_bad_abstain_settings_are_named() -> None:
    with pytest.raises(ConfigurationError, match="unsure"):
        Sampling(abstain_below=0.4, unsure="ask")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="abstain_below"):
        Sampling(abstain_below=1.5)
    with pytest.raises(ConfigurationError, match="abstain_answer"):
        Sampling(abstain_answer=" ")


async def test_a_sure_sample_outweighs_two_unsure_ones_in_the_vote() -> None:
    # One sure add(2, 3) against two unsure add(2, 4): weighed, the sure call runs.
    schedule = ActuatorSchedule(votes=schedule_votes(0.9, 3, 3))
    adder = Adder()
    model = _caller(0.95, 0.1, 0.1, bs=(3, 4, 4))
    agent, _ = make_agent(model, [adder.add], control=ControlConfig(schedule=schedule))
    result = await agent.run("What is 2 + 3?")
    assert adder.ran[0] == (2, 3), result.message
    # With no confidence read, the plain majority runs.
    adder2 = Adder()
    plain = _caller(1.0, bs=(3, 4, 4))
    agent2, _ = make_agent(plain, [adder2.add], control=ControlConfig(schedule=schedule))
    await agent2.run("What is 2 + 3?")
    assert adder2.ran[0] == (2, 4)


def test_logprobs_are_asked_where_the_model_gives_them() -> None:
    class Sure(FunctionModel):
        @property
        def supports_logprobs(self) -> bool:
            return True

    plain = FunctionModel(lambda m, i: final("x"))
    sure = Sure(lambda m, i: final("x"))
    assert make_agent(plain, [])[0].settings.logprobs is False
    assert make_agent(sure, [])[0].settings.logprobs is True
    assert (
        make_agent(sure, [], model_settings=ModelSettings(logprobs=False))[0].settings.logprobs
        is False
    )
    assert make_agent([plain, sure], [])[0].settings.logprobs is True  # any rung
    with pytest.raises(ConfigurationError, match="logprobs"):
        ModelSettings(logprobs="yes")  # type: ignore[arg-type]
