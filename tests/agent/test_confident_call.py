"""The confident call (``Sampling(stop="auto")``): a sure first call runs alone, an unsure
one becomes a vote of up to three, and a model that gives no logprobs keeps the scheduled
votes. It is not the default."""

from __future__ import annotations

import json
import math
import re
from typing import Any

import pytest

from closedloop import ConfigurationError
from closedloop.agent import ControlConfig, HaltReason, ModelSettings, RunResult, Sampling
from closedloop.control import ConfidenceStop
from closedloop.models import CallInfo, FunctionModel, Message, RawCompletion

from .conftest import Adder, answered, call, final, make_agent


class _Reading(FunctionModel):
    """A function model that says it gives logprobs."""

    @property
    def supports_logprobs(self) -> bool:
        return True


def _said(reply: dict[str, Any], p: float | None) -> RawCompletion:
    """``reply`` as JSON text whose every token has probability ``p`` (None: no logprobs)."""
    text = json.dumps(reply)
    if p is None:
        return RawCompletion(text=text)
    pieces = re.findall(r"\w+|[^\w]", text)
    return RawCompletion(text=text, logprobs=tuple((t, math.log(p)) for t in pieces))


def _caller(*samples: tuple[int, float | None]) -> _Reading:
    """Proposes add(2, b) at confidence p for each (b, p) in turn, then answers surely
    once a result is in."""
    count = [0]

    def reply(messages: tuple[Message, ...], info: CallInfo) -> RawCompletion:
        if answered(messages):
            return _said(final("done"), 0.99)
        b, p = samples[count[0] % len(samples)]
        count[0] += 1
        return _said(call("add", a=2, b=b), p)

    return _Reading(reply)


CONFIDENT = ControlConfig(sampling=Sampling(stop="auto"))


def _first_step_calls(result: RunResult) -> int:
    """The model calls of the run's first step (its samples and re-asks)."""
    return result.steps[0].usage.model_calls


async def test_a_confident_first_call_runs_alone() -> None:
    model, adder = _caller((3, 0.9)), Adder()
    agent, _ = make_agent(model, [adder.add], control=CONFIDENT)
    result = await agent.run("What is 2 + 3?")
    assert result.halt_reason is HaltReason.FINAL and adder.ran == [(2, 3)]
    assert _first_step_calls(result) == 1


async def test_an_unsure_first_call_becomes_a_weighted_vote_of_three() -> None:
    # The first sample is unsure; the next two agree on another call, surely: it runs.
    model, adder = _caller((4, 0.3), (3, 0.9), (3, 0.9)), Adder()
    agent, _ = make_agent(model, [adder.add], control=CONFIDENT)
    result = await agent.run("What is 2 + 3?")
    assert _first_step_calls(result) == 3
    assert adder.ran == [(2, 3)], result.message


async def test_a_model_that_sends_no_logprobs_costs_one_sample() -> None:
    model, adder = _caller((3, None)), Adder()
    agent, _ = make_agent(model, [adder.add], control=CONFIDENT)
    result = await agent.run("What is 2 + 3?")
    assert _first_step_calls(result) == 1 and adder.ran == [(2, 3)]


async def test_without_logprobs_the_scheduled_votes_stay() -> None:
    # Asked for no logprobs, an unsure-looking model is sampled once, as before.
    model, adder = _caller((4, 0.3), (3, 0.9), (3, 0.9)), Adder()
    plain = ModelSettings(logprobs=False)
    agent, _ = make_agent(model, [adder.add], model_settings=plain, control=CONFIDENT)
    result = await agent.run("What is 2 + 3?")
    assert _first_step_calls(result) == 1 and adder.ran[0] == (2, 4)
    # So does the default, with logprobs asked: the confident call is opt-in.
    model2, adder2 = _caller((4, 0.3), (3, 0.9), (3, 0.9)), Adder()
    agent2, _ = make_agent(model2, [adder2.add])
    result2 = await agent2.run("What is 2 + 3?")
    assert _first_step_calls(result2) == 1 and adder2.ran[0] == (2, 4)


def test_the_auto_rule_is_resolved_by_whether_logprobs_are_asked() -> None:
    auto = Sampling(stop="auto")
    rule = auto.rule(True)
    assert isinstance(rule, ConfidenceStop)
    assert (rule.threshold, rule.max_samples, rule.when_unknown) == (0.5, 3, "stop")
    assert auto.rule(False) is None
    assert Sampling().stop is None and Sampling().rule(True) is None
    mine = ConfidenceStop(threshold=0.8)
    assert Sampling(stop=mine).rule(False) is mine


def test_a_bad_stop_setting_is_named() -> None:
    with pytest.raises(ConfigurationError, match="stop"):
        Sampling(stop="always")  # type: ignore[arg-type]
