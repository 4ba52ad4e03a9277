"""A fair plant for the agent rows, on test models: a one-call task ends once its call
ran, a repeat of the call that succeeded closes the run with its result, a halt with no
answer is not a right answer on an irrelevance task, and every agent result keeps its
step records (e, u, confidence, actuators, the call and whether it ran)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from closedloop import ConfigurationError
from closedloop_bench.tools import (
    DATA_DIR,
    AgentStrategy,
    ToolsConfig,
    load_tool_tasks,
    oracle_calls,
    read_report,
    run_tools_bench,
    write_report,
)
from closedloop_bench.tools._agents import idle_calls
from closedloop_bench.tools._command import ToolsCommand, run_tools_command
from closedloop_bench.tools._report import idle_on_one_call

DEV = load_tool_tasks(DATA_DIR / "dev.jsonl")
ONE_CALL = [t for t in DEV if t.family in ("single", "choose")][:6]
PARALLEL = [t for t in DEV if t.family == "parallel"][:4]
IRRELEVANT = [t for t in DEV if t.family == "irrelevance"][:3]


async def test_a_one_call_task_ends_once_its_call_ran() -> None:
    config = ToolsConfig(models=("test:repeat",), strategies=("closedloop", "frozen"))
    report = await run_tools_bench(ONE_CALL, config)
    for result in report.results:
        assert result.success, (result.strategy, result.task_id, result.reason)
        assert result.model_calls == 1 and result.idle_calls == 0
        assert result.halt == "final" and [s["executed"] for s in result.steps] == [True]
    assert idle_on_one_call(report) == [
        ("closedloop", "test:repeat", 0, len(ONE_CALL)),
        ("frozen", "test:repeat", 0, len(ONE_CALL)),
    ]


async def test_a_repeat_of_the_call_that_succeeded_closes_the_run_with_its_result() -> None:
    # Parallel tasks declare no completion: the model that repeats its first call ends the
    # run after that call's one execution, with its result as the answer.
    config = ToolsConfig(models=("test:repeat",), strategies=("closedloop",))
    report = await run_tools_bench(PARALLEL, config)
    for task, result in zip(PARALLEL, report.results, strict=True):
        first = oracle_calls(task)[0]
        assert result.calls == (first.as_dict(),)  # executed once, not again
        assert result.halt == "final" and result.model_calls == 2
        assert [s["executed"] for s in result.steps] == [True, False]
        assert result.steps[1]["call"] == first.as_dict() and result.steps[1]["final"]
        assert json.loads(result.final_text)["done"] == first.name  # the call's result
        assert result.idle_calls == 1  # the repeat: the one model call that ran nothing
        assert not result.success  # the other calls are missing, and say so
        assert "missing" in result.reason


async def test_the_loop_as_it_was_counts_the_calls_that_executed_nothing() -> None:
    plain = AgentStrategy(name="plain", declare_completion=False, end_on_repeat=False)
    config = ToolsConfig(models=("test:repeat",), strategies=(plain,))
    report = await run_tools_bench(ONE_CALL, config)
    for result in report.results:
        executed = sum(s["executed"] for s in result.steps)
        assert executed == 1 and result.halt == "repeated_action"
        assert result.idle_calls == result.model_calls - 1 >= 2
    ((_, _, idle, calls),) = idle_on_one_call(report)
    assert idle == calls - len(ONE_CALL) and idle / calls > 0.5
    assert report.cell("plain", "test:repeat").idle_calls == sum(
        r.idle_calls or 0 for r in report.results
    )


async def test_a_halt_with_no_answer_is_not_a_right_answer_on_an_irrelevance_task() -> None:
    # Prose is an answer (the one-call row declines in words); an agent that never gets a
    # valid reply halts with nothing said and no call: counted apart, and a failure.
    config = ToolsConfig(models=("test:prose",), strategies=("open_loop", "closedloop"))
    report = await run_tools_bench(IRRELEVANT, config)
    words = report.cell("open_loop", "test:prose")
    assert words.successes == len(IRRELEVANT) and words.halted_no_answer == 0
    halted = report.cell("closedloop", "test:prose")
    assert halted.successes == 0 and halted.halted_no_answer == len(IRRELEVANT)
    for result in report.results:
        if result.strategy == "closedloop":
            assert result.halted_no_answer and "halted with no answer" in result.reason
    declines = await run_tools_bench(IRRELEVANT, ToolsConfig(models=("test:no-call",)))
    assert declines.cell("open_loop", "test:no-call").successes == len(IRRELEVANT)


async def test_the_results_json_keeps_each_agent_step_with_its_u(tmp_path: Path) -> None:
    tasks = [*ONE_CALL[:2], *PARALLEL[:2], *IRRELEVANT[:1]]
    config = ToolsConfig(models=("test:oracle",), strategies=("open_loop", "closedloop", "frozen"))
    path = write_report(await run_tools_bench(tasks, config), tmp_path / "r.json")
    data = json.loads(path.read_text())
    agents = [r for r in data["results"] if r["strategy"] != "open_loop"]
    assert len(agents) == 2 * len(tasks)
    for result in agents:
        assert result["steps"] and result["idle_calls"] is not None
        for step in result["steps"]:
            assert isinstance(step["u"], float) and 0.0 <= step["e"] <= 1.0
            assert step["actuators"]["strictness"] and "confidence" in step
            assert set(step) >= {"step", "call", "executed", "model_calls", "halt"}
        frozen = result["strategy"] == "frozen"
        assert all(s["u"] == 0.5 for s in result["steps"]) or not frozen
    baseline = [r for r in data["results"] if r["strategy"] == "open_loop"]
    assert all(r["steps"] == [] and r["idle_calls"] is None for r in baseline)
    back = read_report(path)  # and the report reads back with its steps
    assert back.results[1].steps == tuple(agents[0]["steps"])


def test_the_command_keeps_the_families_asked_for_and_prints_the_idle_calls(
    tmp_path: Path,
) -> None:
    lines: list[str] = []
    options = ToolsCommand(
        split="dev",
        families="single,choose",
        limit=4,
        models="test:repeat",
        strategies="strict,closedloop",
        results=tmp_path,
        plot=False,
        progress=False,
    )
    report = run_tools_command(options, say=lines.append)
    assert report is not None
    assert {r.family for r in report.results} == {"single", "choose"}
    assert len(report.results) == 2 * 4
    assert any(
        line.startswith("model calls that executed nothing on one-call tasks: closedloop")
        and line.endswith("0 of 4 (0 %)")
        for line in lines
    )
    assert (tmp_path / "dev-single+choose-4.json").exists()
    with pytest.raises(ConfigurationError, match="--family"):
        run_tools_command(ToolsCommand(families="single,bogus", results=tmp_path), say=print)


def test_idle_calls_count_steps_that_ran_nothing_and_replies_refused_before_a_call() -> None:
    def step(executed: bool, calls: int, reasks: int = 0) -> dict[str, object]:
        return {"executed": executed, "model_calls": calls, "actuators": {"reasks": reasks}}

    assert idle_calls([step(True, 1)]) == 0
    assert idle_calls([step(True, 2, reasks=1), step(False, 1)]) == 2
    assert idle_calls([step(False, 3, reasks=1)]) == 3  # a refused step: all of its calls
    assert idle_calls([step(True, 3)]) == 0  # three votes, one proposal that ran
