"""The agent-based strategies and the fixed settings, on test models: registered, sending
the shared prompt, scored by the checker, and their bad input refused before any call."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from closedloop import ConfigurationError
from closedloop.models import CallInfo, FunctionModel, Message, Model
from closedloop_bench.tools import (
    DATA_DIR,
    FROZEN_U,
    AgentStrategy,
    Attempt,
    OpenLoop,
    ToolsConfig,
    ToolTask,
    agent_instructions,
    agent_takes_ladder,
    build_messages,
    get_tool_strategy,
    load_tool_tasks,
    oracle_calls,
    run_tools_bench,
    strategy_names,
    system_prompt,
)
from closedloop_bench.tools._agents import frozen_control

DEV = load_tool_tasks(DATA_DIR / "dev.jsonl")
ALL_STRATEGIES = ("open_loop", "strict", "reask@2", "votes@3", "strong", "closedloop", "frozen")


def _recorder(reply: str) -> tuple[FunctionModel, list[tuple[Message, ...]]]:
    sent: list[tuple[Message, ...]] = []

    def answer(messages: Sequence[Message], _call: CallInfo) -> str:
        sent.append(tuple(messages))
        return reply

    return FunctionModel(answer, name="recorder"), sent


def test_every_strategy_is_registered_with_its_fixed_flag() -> None:
    names = strategy_names()
    for name in ("open_loop", "strict", "strong", "closedloop", "frozen", "ladder", "reduced"):
        assert name in names
    assert "reask@N" in names and "votes@N" in names
    fixed = {name: get_tool_strategy(name).fixed for name in ALL_STRATEGIES}
    assert fixed == {
        "open_loop": True,
        "strict": True,
        "reask@2": True,
        "votes@3": True,
        "strong": True,
        "closedloop": False,
        "frozen": True,
    }
    assert get_tool_strategy("reask@4").name == "reask@4"
    assert get_tool_strategy("strong").runs_on == "strongest"  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", ["votes@0", "reask@0", "votes@-1", "votes@two", "nope@3"])
def test_bad_counts_are_refused_by_name(name: str) -> None:
    with pytest.raises(ConfigurationError, match=name.replace("-", "\\-")):
        get_tool_strategy(name)


def test_the_reduced_strategy_is_the_closed_loop_with_context_reduction_only() -> None:
    reduced = get_tool_strategy("reduced").control()  # type: ignore[attr-defined]
    plain = get_tool_strategy("closedloop").control()  # type: ignore[attr-defined]
    assert reduced.schedule(0.9).context == 0.5 and reduced.schedule(0.1).context == 1.0
    assert plain.schedule(0.9).context == 1.0
    calm = {k: v for k, v in reduced.schedule(0.9).as_dict().items() if k != "context"}
    assert calm == {k: v for k, v in plain.schedule(0.9).as_dict().items() if k != "context"}


def test_the_ladder_strategy_runs_on_an_agent_that_takes_a_list() -> None:
    assert agent_takes_ladder() is True  # Agent(model=[...]) is a model ladder
    ladder = get_tool_strategy("ladder")
    assert ladder.runs_on == "ladder"  # type: ignore[attr-defined]


@pytest.mark.parametrize("family", ["single", "parallel", "irrelevance", "multi_turn"])
async def test_the_one_call_strategies_send_exactly_the_open_loop_prompt(family: str) -> None:
    task = next(t for t in DEV if t.family == family)
    model, sent = _recorder('{"no_call": "none fits"}')
    for name in ("open_loop", "strict", "reask@2", "votes@3", "strong"):
        await get_tool_strategy(name).solve(task, model)
    assert len(sent) == 1 + 1 + 1 + 3 + 1  # a valid answer is not re-asked
    assert all(messages == sent[0] for messages in sent)
    assert [m.content for m in sent[0]] == [m.content for m in build_messages(task)]


@pytest.mark.parametrize("name", ["closedloop", "frozen"])
@pytest.mark.parametrize("family", ["single", "choose", "multi_turn"])
async def test_the_agents_send_the_shared_task_text_with_each_function_once(
    name: str, family: str
) -> None:
    task = next(t for t in DEV if t.family == family)
    model, sent = _recorder('{"final": "nothing to do"}')
    await get_tool_strategy(name).solve(task, model)
    system, user = sent[0][0].content, sent[0][-1].content
    assert agent_instructions(task) in system
    # The rules and the user's words are the open loop's; only the answer forms differ
    # (one call a reply instead of every call at once).
    assert '{"calls"' not in system
    for message in task.messages:
        assert message.content in user
    # Each function is listed once, in the agent's own listing: its description once,
    # and as many argument schemas in the whole prompt as the single-call prompt holds.
    prompt = "\n".join(m.content for m in sent[0])
    for function in task.functions.values():
        assert prompt.count(function.description) == 1, function.name
        assert prompt.count(f"- {function.name}: ") == 1, function.name
    assert prompt.count('"properties"') == system_prompt(task).count('"properties"') > 0


async def test_the_agents_first_prompt_is_near_the_single_call_prompt() -> None:
    # Listed once, the functions cost the agent what they cost the single call; what the
    # agent adds is its frame (the reply format, the data rule, the task state).
    ratios = []
    for task in [t for t in DEV if t.family in ("single", "choose")][:6]:
        model, sent = _recorder('{"final": "nothing to do"}')
        await get_tool_strategy("closedloop").solve(task, model)
        agent = sum(len(m.content) for m in sent[0])
        single = sum(len(m.content) for m in build_messages(task))
        frame = len(agent_instructions(task)) + 1200  # the agent's fixed words, at most
        assert agent <= single + frame, task.id
        ratios.append(agent / single)
    assert max(ratios) < 2.3  # the ratio the doubled listing gave on real tasks


def _has_repeated_call(task: ToolTask) -> bool:
    keys = [json.dumps(c.as_dict(), sort_keys=True) for c in oracle_calls(task)]
    return len(keys) != len(set(keys))


async def test_every_strategy_is_scored_by_the_checker() -> None:
    config = ToolsConfig(models=("test:no-call", "test:oracle"), strategies=ALL_STRATEGIES)
    report = await run_tools_bench(DEV, config)
    repeated = {t.id for t in DEV if _has_repeated_call(t)}
    for name in ALL_STRATEGIES:
        oracle = [r for r in report.results if r.strategy == name and r.model == "test:oracle"]
        failed = {r.task_id for r in oracle if not r.success}
        if name in ("closedloop", "frozen"):
            # The loop refuses a call it has just made: a task that asks for the same call
            # twice loses the second one. Every other task is solved.
            assert failed == repeated
        else:
            assert failed == set()
        assert len(oracle) == len(DEV)
    for name in ("closedloop", "frozen", "open_loop", "reask@2"):
        declines = report.cell(name, "test:no-call")
        assert declines.successes == sum(t.family == "irrelevance" for t in DEV)
    # strong runs on the last (strongest) model only.
    assert {r.model for r in report.results if r.strategy == "strong"} == {"test:oracle"}
    loop = report.cell("closedloop", "test:oracle", "multi_turn")
    assert loop.model_calls > 1  # one call a reply, then the final answer


def test_frozen_holds_every_actuator_and_the_protocol() -> None:
    frozen = frozen_control()
    assert frozen.protocols is False
    on = AgentStrategy().control()
    schedule = frozen.schedule
    assert schedule.hold == FROZEN_U and schedule(1.0).u == FROZEN_U  # u reported held
    for name in type(schedule).__dataclass_fields__.keys() - {"hold"}:
        fn = getattr(schedule, name)
        assert fn(0.0) == fn(1.0) == getattr(on.schedule, name)(FROZEN_U), name
    built = get_tool_strategy("frozen").control()  # type: ignore[attr-defined]
    assert built.protocols is False and built.schedule.strictness(0.0) == schedule.strictness(1.0)
    assert AgentStrategy().control().protocols is True  # the controller on keeps the ESO


def _scripted(replies: list[str]) -> tuple[FunctionModel, list[tuple[Message, ...]]]:
    sent: list[tuple[Message, ...]] = []

    def answer(messages: Sequence[Message], _call: CallInfo) -> str:
        sent.append(tuple(messages))
        return replies[min(len(sent), len(replies)) - 1]

    return FunctionModel(answer, name="scripted"), sent


def _single() -> ToolTask:
    return next(t for t in DEV if t.family == "single")


async def test_reask_sends_the_validator_error_and_stops_when_valid() -> None:
    task = _single()
    right = json.dumps({"calls": [c.as_dict() for c in oracle_calls(task)]})
    model, sent = _scripted(['{"calls": [{"name": "no_such_fn", "arguments": {}}]}', right])
    attempt = await get_tool_strategy("reask@3").solve(task, model)
    assert attempt.model_calls == 2 and attempt.error is None
    assert list(attempt.calls) == oracle_calls(task)
    again = sent[1][-1].content
    assert "unknown function 'no_such_fn'" in again and sent[1][-2].role == "assistant"
    stubborn, calls = _scripted(["not json"])
    failed = await get_tool_strategy("reask@1").solve(task, stubborn)
    assert len(calls) == 2 and failed.error == "no JSON answer in the reply"


async def test_votes_take_the_majority_of_valid_samples() -> None:
    task = _single()
    right = json.dumps({"calls": [c.as_dict() for c in oracle_calls(task)]})
    other = '{"no_call": "none fits"}'
    bad = '{"calls": [{"name": "no_such_fn", "arguments": {}}]}'
    model, _sent = _scripted([other, right, bad, right, bad])
    attempt = await get_tool_strategy("votes@5").solve(task, model)
    assert list(attempt.calls) == oracle_calls(task)
    assert attempt.extra == {"votes": 2, "samples": 5, "distinct": 2}
    assert all(call.request.temperature > 0 for call in model.calls)
    assert len({call.request.seed for call in model.calls}) == 5


@dataclass
class _LadderProbe:
    """A strategy that runs once on the whole ladder and says which models it got."""

    name: str = "ladder_probe"
    fixed: bool = False
    runs_on: str = "ladder"
    seen: list[list[str]] = field(default_factory=list)

    async def solve(self, task: ToolTask, model: Model) -> Attempt:
        raise AssertionError("a ladder strategy is solved on the ladder")

    async def solve_ladder(self, task: ToolTask, models: Sequence[Model]) -> Attempt:
        self.seen.append([m.name for m in models])
        await models[0].complete("cheap first")
        return Attempt(calls=tuple(oracle_calls(task)))


async def test_the_runner_hands_a_ladder_strategy_every_model_weakest_first() -> None:
    probe = _LadderProbe()
    config = ToolsConfig(models=("test:no-call", "test:oracle"), strategies=(probe, OpenLoop()))
    report = await run_tools_bench(DEV[:4], config)
    assert probe.seen == [["test:no-call", "test:oracle"]] * 4
    cell = report.cell("ladder_probe", "test:no-call > test:oracle")
    assert cell.successes == 4 and cell.model_calls == 1.0
    assert {r.model for r in report.results if r.strategy == "open_loop"} == {
        "test:no-call",
        "test:oracle",
    }


async def test_the_gated_loop_abstains_where_it_is_unsure_and_the_checker_scores_it() -> None:
    import math
    import re

    from closedloop.models import RawCompletion
    from closedloop_bench.tools import score
    from closedloop_bench.tools._agents import GATE, AgentStrategy

    irrelevant = next(t for t in DEV if t.family == "irrelevance")
    offered = irrelevant.tools[0].function.name

    def unsure(_messages: Sequence[Message], _call: CallInfo) -> RawCompletion:
        text = json.dumps({"tool": offered, "arguments": {}})
        pieces = re.findall(r"\w+|[^\w]", text)
        return RawCompletion(text=text, logprobs=tuple((p, math.log(0.2)) for p in pieces))

    for name, expect_abstain in (("gated", True), ("frozen_gated", True), ("closedloop", False)):
        strategy = get_tool_strategy(name)
        assert isinstance(strategy, AgentStrategy)
        if name != "closedloop":
            assert strategy.control(irrelevant).sampling == GATE
        attempt = await strategy.solve(irrelevant, FunctionModel(unsure, name="unsure"))
        assert (attempt.extra["halt"] == "abstained") is expect_abstain, name
        if expect_abstain:  # no call and an answer: right where no offered tool fits
            assert attempt.calls == () and attempt.final_text == GATE.abstain_answer
            assert score(irrelevant, list(attempt.calls), attempt.final_text).success
