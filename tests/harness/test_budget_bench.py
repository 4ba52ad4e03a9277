"""``bench refine --budget``: policies at one total, curves at equal cost, the focused form."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from closedloop import ConfigurationError
from closedloop.harness import (
    LRU_CACHE,
    SPIRAL_MATRIX,
    AllocationRecord,
    BudgetBenchConfig,
    BudgetRun,
    CheckResult,
    Evaluation,
    EvaluationStatus,
    ModelGenerator,
    RefinementResult,
    Refiner,
    compare_at,
    cost_curve,
    focused_feedback,
    policy_from_spec,
    render_budget_report,
    run_budget_bench,
    stop_after_rounds,
)
from closedloop.harness._curves import wilson
from closedloop.harness._prompts import focused_lines
from closedloop.models import CallInfo, FunctionModel, Message

from . import solutions
from .conftest import ADD_TASK, ScriptedEvaluator, fenced, score_task

ROOT = Path(__file__).resolve().parents[2]
BAD = {
    "spiral_order": "def spiral_order(m):\n    return [x for r in m for x in r]\n",
    "LRUCache": solutions.LRU_GET_NO_REFRESH,
}
GOOD = {"spiral_order": solutions.SPIRAL, "LRUCache": solutions.LRU}


def answer(messages: tuple[Message, ...], call: CallInfo) -> str:
    """Right at the third sample of the spiral at T 0.6; the LRU cache never."""
    key = next(k for k in GOOD if k in messages[1].content)
    right = key == "spiral_order" and call.request.seed == 2 and call.request.temperature == 0.6
    return fenced(GOOD[key] if right else BAD[key])


POLICIES = ("even:blind_retry", "resample_until_pass@0.6", "allocator")


async def run_small(tmp_path: Path, **overrides: Any) -> Any:
    options: dict[str, Any] = {
        "policies": POLICIES,
        "generations": 8,
        "out": tmp_path / "out",
        **overrides,
    }
    return await run_budget_bench(
        BudgetBenchConfig(**options),
        model=FunctionModel(answer),
        tasks=[SPIRAL_MATRIX, LRU_CACHE],
    )


@pytest.mark.integration
async def test_the_budget_bench_writes_a_per_token_curve_for_every_policy(tmp_path: Path) -> None:
    report = await run_small(tmp_path)
    data = json.loads((tmp_path / "out" / "results.json").read_text())
    names = ["even:blind_retry", "resample_until_pass@0.6", "allocator"]
    assert [s["policy"] for s in data["summaries"]] == names
    for name in names:
        curve = data["curves"][name]
        assert curve and all(
            {"tokens", "generations", "solved", "pass_rate"} <= set(p) for p in curve
        )
        tokens = [p["tokens"] for p in curve]
        assert tokens == sorted(tokens) and tokens[-1] == report.runs[name].tokens
    summary = {s["policy"]: s for s in data["summaries"]}
    assert summary["even:blind_retry"]["generations"] == 8  # 4 each, none solved by T 0.2
    assert summary["resample_until_pass@0.6"]["solved"] == 1
    assert all(s["returned_regressed"] == 0 for s in data["summaries"])
    assert {c["unit"] for c in data["equal_tokens"] + data["equal_generations"]} == {
        "tokens",
        "generations",
    }
    assert all(c["a"] == "allocator" for c in data["equal_generations"])
    for png in ("pass_rate_vs_cost.png", "allocation.png"):
        assert (tmp_path / "out" / png).read_bytes().startswith(b"\x89PNG")
    console = Console(record=True, width=220)
    render_budget_report(report, console)
    text = console.export_text()
    assert "each policy at the same total" in text and "paired" in text


@pytest.mark.integration
async def test_a_cache_only_rerun_replays_the_live_run(tmp_path: Path) -> None:
    cache = tmp_path / "gens.sqlite"
    live = await run_small(tmp_path, cache_path=cache)
    # No model: only its name, which the cache keys hold ("function" for a FunctionModel).
    replay_options: dict[str, Any] = {"model": "function", "cache_path": cache, "cache_only": True}
    replay = await run_budget_bench(
        BudgetBenchConfig(policies=POLICIES, generations=8, **replay_options),
        tasks=[SPIRAL_MATRIX, LRU_CACHE],
    )
    for name, run in live.runs.items():
        again = replay.runs[name]
        assert again.misses == 0
        assert [a.score for a in again.allocations] == [a.score for a in run.allocations]
    # Twice the budget: what the live run never asked for is a recorded miss, not a call.
    longer = await run_budget_bench(
        BudgetBenchConfig(policies=("resample_until_pass@0.6",), generations=12, **replay_options),
        tasks=[SPIRAL_MATRIX, LRU_CACHE],
    )
    again = longer.runs["resample_until_pass@0.6"]
    # The spiral was solved in round 3, so the LRU cache had rounds 1-5 of the 8; its rounds
    # 6-9 were never made.
    assert again.misses == 4 and [a.round for a in again.allocations if a.miss] == [6, 7, 8, 9]


def test_the_config_and_the_policy_names_are_checked() -> None:
    with pytest.raises(ConfigurationError, match="unknown"):
        policy_from_spec("magic")
    with pytest.raises(ConfigurationError, match="generations, tokens or both"):
        BudgetBenchConfig()
    with pytest.raises(ConfigurationError, match="needs --cache"):
        BudgetBenchConfig(generations=4, cache_only=True)
    # The settings every bench run has are checked here as in ``BenchConfig``, when the
    # config is made, not when the run first loads its tasks.
    for bad, name in (({"tasks": "everything"}, "tasks"), ({"threads": 0}, "threads")):
        with pytest.raises(ConfigurationError) as info:
            BudgetBenchConfig(generations=4, **bad)
        assert info.value.argument == name
    assert policy_from_spec("even:pid").name == "even:pid"
    assert policy_from_spec("resample_until_pass@0.6").name == "resample_until_pass@0.6"
    assert policy_from_spec("allocator_focused").name == "allocator:resample,resample@0.6,focused"


def test_bench_refine_help_names_the_budget_options() -> None:
    from closedloop_bench.cli._bench import app

    result = CliRunner().invoke(app, ["refine", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    for option in ("--budget", "--budget-tokens", "--policies", "--cache-only"):
        assert option in result.output
    bad = CliRunner().invoke(app, ["refine", "--cache-only"])
    assert isinstance(bad.exception, ConfigurationError)


def test_the_bench_script_builds_a_budgeted_config() -> None:
    spec = importlib.util.spec_from_file_location("bench_refine", ROOT / "bench" / "refine.py")
    assert spec is not None and spec.loader is not None
    script: ModuleType = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    argv = ["--tasks", "humaneval", "--budget", "492", "--cache", "/tmp/g.sqlite", "--cache-only"]
    config = script.parse_budget(argv)
    assert (config.generations, config.tokens, config.cache_only) == (492, None, True)
    assert script.parse_budget(["--tasks", "seed"]) is None


# --- curves and paired comparisons ------------------------------------------------------


def fake_run(name: str, scores: list[tuple[str, float, int]]) -> BudgetRun:
    """A run from (problem, score, tokens) generations in order."""
    records, total = [], 0
    for step, (problem, score, tokens) in enumerate(scores, 1):
        total += tokens
        records.append(
            AllocationRecord(
                step=step,
                problem=problem,
                round=1,
                action="resample",
                reason="",
                temperature=None,
                seed=0,
                score=score,
                best=score,
                V=0.0,
                dV=None,
                prompt_tokens=tokens,
                completion_tokens=0,
                generations=step,
                tokens=total,
            )
        )
    problems = sorted({p for p, _, _ in scores})
    results = tuple(
        RefinementResult(
            task=p,
            strategy=name,
            target=1.0,
            rounds=(),
            best_round=1,
            best_code="",
            best_score=max(s for q, s, _ in scores if q == p),
            stop_reason="external",
            stop_detail="",
        )
        for p in problems
    )
    return BudgetRun(
        policy=name,
        budget_generations=None,
        budget_tokens=None,
        generations=len(records),
        tokens=total,
        misses=0,
        allocations=tuple(records),
        results=results,
    )


def test_a_curve_reads_the_batch_after_each_generation() -> None:
    run = fake_run("a", [("x", 0.5, 10), ("y", 1.0, 10), ("x", 1.0, 30)])
    curve = cost_curve(run)
    assert [(p.generations, p.tokens, p.solved) for p in curve] == [
        (1, 10, 0),
        (2, 20, 1),
        (3, 50, 2),
    ]
    assert curve[0].pass_rate == pytest.approx(0.25)
    assert curve[0].solved_low == 0.0 and 0.0 < curve[-1].solved_low < 1.0


def test_paired_comparison_at_equal_tokens() -> None:
    a = fake_run("a", [("x", 1.0, 10), ("y", 0.0, 10), ("z", 1.0, 10), ("y", 1.0, 100)])
    b = fake_run("b", [("x", 0.0, 10), ("y", 1.0, 10), ("z", 1.0, 10)])
    at_30 = compare_at(a, b, 30)
    assert (at_30.a_solved, at_30.b_solved, at_30.only_a, at_30.only_b) == (2, 2, 1, 1)
    assert at_30.points == 0.0 and at_30.low < 0.0 < at_30.high
    later = compare_at(a, b, 130)  # a's late fix counts only once it has been paid for
    assert later.points == pytest.approx(100 / 3)
    assert compare_at(a, b, 3, unit="generations").a_solved == 2


def test_wilson_interval() -> None:
    low, high = wilson(111, 164)
    assert low < 111 / 164 < high and high - low < 0.15
    assert wilson(0, 0) == (0.0, 1.0)


# --- the focused feedback form --------------------------------------------------------


def test_focused_feedback_shows_the_smallest_failure_its_line_and_a_diff() -> None:
    checks = (
        CheckResult(name="T1", passed=True, call="add(1, 2)"),
        CheckResult(
            name="T2", passed=False, call="add(100000, 200000)", got="1", expected="300000"
        ),
        CheckResult(name="T3", passed=False, call="add(1, 1)", got="1", expected="2"),
        CheckResult(
            name="T4",
            passed=False,
            call="add('a', 'b')",
            error="raised TypeError: bad operand (line 2: return a - b)",
        ),
    )
    ev = Evaluation(status=EvaluationStatus.FAILED, reason="3 failed", checks=checks)
    best = "def add(a, b):\n    return a - b + 1\n"
    lines = focused_lines(ev, ADD_TASK, best, "def add(a, b):\n    return a * b\n")
    text = "\n".join(lines)
    assert "add(1, 1) returned 1, expected 2" in text and "100000" not in text
    assert "1 of 4 pass" in text
    assert "```diff" in text and "-    return a - b + 1" in text and "+    return a * b" in text
    raised = Evaluation(status=EvaluationStatus.FAILED, reason="", checks=(checks[0], checks[3]))
    assert "It fails at line 2: `return a - b`" in "\n".join(focused_lines(raised, ADD_TASK, best))
    assert not any("diff" in line for line in focused_lines(ev, ADD_TASK, best, best))


async def test_the_focused_strategy_edits_the_best_program_and_goes_fresh_on_a_repeat() -> None:
    seen: list[tuple[Message, ...]] = []
    answers = iter([2, 1, 1, 4])

    def fn(messages: tuple[Message, ...], call: CallInfo) -> str:
        seen.append(messages)
        n = next(answers)
        return fenced(f"# passes {n}\ndef f():\n    return {n if n != 1 else 'one'}\n")

    refiner = Refiner(
        ModelGenerator(FunctionModel(fn)),
        ScriptedEvaluator(),
        focused_feedback(),
        stop=stop_after_rounds(4),
        max_rounds=4,
    )
    result = await refiner.run(score_task(4))
    assert result.best_score == 1.0
    second, third, fourth = seen[1], seen[2], seen[3]
    # Round 2 edits round 1's program: shown as the assistant's answer, one failing test.
    assert second[2].role == "assistant" and "# passes 2" in second[2].content
    assert "The smallest failing test (2 of 4 pass)" in second[-1].content
    # Round 2 did worse: round 3 still edits the best, with a diff of what got worse.
    assert "# passes 2" in third[2].content and "```diff" in third[-1].content
    # Round 3 handed back round 2's program: round 4 asks afresh and shows no code.
    assert len(fourth) == 2 and "from scratch" in fourth[-1].content
    assert result.rounds[3].temperature == 0.6


def test_cli_refine_with_a_budget_runs_the_budgeted_bench(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from closedloop_bench.cli import _bench as cli_bench

    seen: list[BudgetBenchConfig] = []

    async def fake(config: BudgetBenchConfig, **kwargs: Any) -> None:
        seen.append(config)
        raise ConfigurationError("model", config.model, "not run in this test")

    monkeypatch.setattr(cli_bench, "run_budget_bench", fake)
    cache = tmp_path / "gens.sqlite"
    args = ["refine", "--tasks", "humaneval", "--budget", "492", "--budget-tokens", "9000"]
    args += ["--cache", str(cache), "--cache-only", "--policies", "allocator,even:pid"]
    result = CliRunner().invoke(cli_bench.app, args)
    assert isinstance(result.exception, ConfigurationError)
    assert [(c.generations, c.tokens, c.cache_path, c.cache_only, c.policies) for c in seen] == [
        (492, 9000, cache, True, ("allocator", "even:pid"))
    ]
