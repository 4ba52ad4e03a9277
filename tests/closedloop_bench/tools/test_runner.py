"""The runner, the report and the script, on test models only."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from closedloop import ConfigurationError, RealModelCallBlockedError
from closedloop.models import Model
from closedloop_bench.tools import (
    DATA_DIR,
    Attempt,
    Cell,
    TaskTools,
    ToolsConfig,
    ToolTask,
    fixed_frontier,
    get_tool_strategy,
    load_tool_tasks,
    oracle_calls,
    plot_plane,
    register_strategy,
    render_table,
    run_tools_bench,
    write_report,
)
from closedloop_bench.tools._strategies import _REGISTRY

from .conftest import BenchScript

ROOT = Path(__file__).resolve().parents[3]
DEV = load_tool_tasks(DATA_DIR / "dev.jsonl")


async def test_test_models_bound_the_scores() -> None:
    config = ToolsConfig(models=("test:oracle", "test:no-call", "test:prose"))
    report = await run_tools_bench(DEV, config)
    for strategy in ("open_loop", "strict"):
        oracle = report.cell(strategy, "test:oracle")
        assert (oracle.n, oracle.successes) == (100, 100)
        assert oracle.low > 0.95 and oracle.high == 1.0
        declines = report.cell(strategy, "test:no-call")
        assert declines.successes == 20  # exactly the irrelevance family
        assert report.cell(strategy, "test:no-call", "irrelevance").rate == 1.0
        assert report.cell(strategy, "test:no-call", "single").rate == 0.0
        assert report.cell(strategy, "test:prose", "parallel").errors == 20
    assert len(report.results) == 2 * 3 * 100


async def test_report_json_table_and_plane(tmp_path: Path) -> None:
    report = await run_tools_bench(DEV[:10], ToolsConfig(models=("test:oracle", "test:no-call")))
    path = write_report(report, tmp_path / "r.json")
    data = json.loads(path.read_text())
    assert data["benchmark"] == "tools" and data["schema"] == 1
    assert {c["family"] for c in data["cells"]} >= {"all", "single"}
    assert len(data["results"]) == 40
    table = render_table(report)
    assert "open_loop" in table and "95 % CI" in table and "test:no-call" in table
    png = plot_plane(report, tmp_path / "plane.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _cell(strategy: str, rate: float, tokens: float) -> Cell:
    return Cell(strategy, "m", "all", 10, int(rate * 10), rate, 0.0, 1.0, 1.0, tokens, 0.0, 1.0, 0)


def test_the_frontier_keeps_only_undominated_fixed_settings() -> None:
    cells = [
        _cell("cheap", 0.3, 100),
        _cell("dominated", 0.2, 200),
        _cell("better", 0.6, 300),
        _cell("adaptive", 0.9, 50),
    ]
    fixed = {"cheap": True, "dominated": True, "better": True, "adaptive": False}
    assert [c.strategy for c in fixed_frontier(cells, fixed, "tokens")] == ["cheap", "better"]
    with pytest.raises(ValueError, match="cost"):
        fixed_frontier(cells, fixed, "dollars")


def test_unknown_and_unwired_strategies_are_clear_errors() -> None:
    with pytest.raises(ConfigurationError, match=r"runnable: open_loop, strict, .*reask@N"):
        get_tool_strategy("nonsense")
    saved = _REGISTRY.pop("frozen")
    try:
        with pytest.raises(ConfigurationError, match="not wired yet"):
            get_tool_strategy("frozen")
    finally:
        _REGISTRY["frozen"] = saved


@dataclass(frozen=True)
class _ToolRunner:
    """An agent-like strategy: runs the oracle's calls through TaskTools one by one."""

    name: str = "closedloop"
    fixed: bool = False

    async def solve(self, task: ToolTask, model: Model) -> Attempt:
        tools = TaskTools(task)
        for call in oracle_calls(task):
            assert tools.call(call.name, call.arguments).ok
        return Attempt(calls=tuple(tools.calls), model_calls=2, env_state=tools.state())


async def test_an_agent_strategy_plugs_in_through_the_hook() -> None:
    saved = _REGISTRY["closedloop"]
    register_strategy("closedloop", _ToolRunner, replace=True)
    try:
        report = await run_tools_bench(DEV, ToolsConfig(strategies=("closedloop", "strict")))
    finally:
        _REGISTRY["closedloop"] = saved
    cell = report.cell("closedloop", "test:oracle")
    assert cell.successes == 100 and cell.model_calls == 2.0
    assert report.strategies == {"closedloop": False, "strict": True}
    with pytest.raises(ConfigurationError, match="registered already"):
        register_strategy("strict", _ToolRunner)


def test_task_tools_check_stateless_calls() -> None:
    task = next(t for t in DEV if t.family == "single")
    tools = TaskTools(task)
    name = next(iter(task.functions))
    assert not tools.call("missing_fn", {}).ok
    assert not tools.call(name, {}).ok  # every single-family function requires an argument
    assert tools.call(name, oracle_calls(task)[0].arguments).ok
    assert tools.state() is None and len(tools.calls) == 3


async def test_bad_specs_fail_before_any_model_call() -> None:
    with pytest.raises(ConfigurationError, match="test models"):
        await run_tools_bench(DEV, ToolsConfig(models=("test:oracle", "test:nope")))
    with pytest.raises(ConfigurationError):
        await run_tools_bench(DEV, ToolsConfig(models=("nokind",)))
    with pytest.raises(ConfigurationError, match="at least one"):
        await run_tools_bench(DEV, ToolsConfig(strategies=()))


def test_real_models_stay_blocked_in_tests() -> None:
    from closedloop.models import load_model

    try:
        model = load_model("local:smollm2-135m")
    except Exception:  # the model file may be absent on a fresh machine
        pytest.skip("smollm2 is not pulled here")
    import asyncio

    with pytest.raises(RealModelCallBlockedError):
        asyncio.run(model.complete("hi"))


def test_the_script_runs_a_user_task_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], bench_script: BenchScript
) -> None:
    script = bench_script("tools")
    out = tmp_path / "example.json"
    code = script.main(
        [
            "--tasks",
            str(ROOT / "examples" / "tools_tasks.jsonl"),
            "--models",
            "test:oracle",
            "--out",
            str(out),
            "--no-progress",
        ]
    )
    assert code == 0
    data = json.loads(out.read_text())
    assert all(c["rate"] == 1.0 for c in data["cells"])
    assert out.with_suffix(".png").exists()
    assert "report:" in capsys.readouterr().out


def test_the_script_limit_interleaves_families(bench_script: BenchScript) -> None:
    script = bench_script("tools")
    first = script.interleave(DEV)[:5]
    assert [t.family for t in first] == [
        "single",
        "choose",
        "parallel",
        "irrelevance",
        "multi_turn",
    ]
    assert script.main(["--limit", "0"]) == 2


async def test_a_budget_stops_between_tasks_with_the_strategies_paired() -> None:
    ticks = iter(range(0, 10_000, 5))
    report = await run_tools_bench(
        DEV, ToolsConfig(budget_s=42.0), clock=lambda: float(next(ticks))
    )
    ran = report.meta["tasks_run"]["test:oracle"]
    assert 0 < ran < len(DEV)
    assert len(report.results) == 2 * ran
    by_strategy = {
        s: [r.task_id for r in report.results if r.strategy == s] for s in report.strategies
    }
    assert by_strategy["open_loop"] == by_strategy["strict"]
    with pytest.raises(ConfigurationError, match="budget_s"):
        await run_tools_bench(DEV, ToolsConfig(budget_s=0))


async def test_a_written_report_reads_back(tmp_path: Path) -> None:
    from closedloop_bench.tools import read_report

    report = await run_tools_bench(DEV[:6], ToolsConfig(models=("test:no-call",)))
    again = read_report(write_report(report, tmp_path / "r.json"))
    assert again.cells == report.cells and again.results == report.results
    assert again.strategies == report.strategies
    (tmp_path / "other.json").write_text('{"benchmark": "faults"}')
    with pytest.raises(ValueError, match="not a tool-calling report"):
        read_report(tmp_path / "other.json")


def test_the_script_reports_bad_input_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], bench_script: BenchScript
) -> None:
    script = bench_script("tools")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "x"}\n')
    assert script.main(["--tasks", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "line 1" in err
    assert script.main(["--strategies", "votes@0"]) == 2
    assert "the vote count k must be at least 1" in capsys.readouterr().err


@dataclass(frozen=True)
class _TwoCalls:
    """Calls the model twice and reports no cost of its own: the runner's meter must."""

    name: str = "twice"
    fixed: bool = False

    async def solve(self, task: ToolTask, model: Model) -> Attempt:
        await model.complete("first")
        await model.complete("second")
        return Attempt(calls=tuple(oracle_calls(task)))


async def test_the_runner_meters_what_a_strategy_does_not_count() -> None:
    report = await run_tools_bench(DEV[:5], ToolsConfig(strategies=(_TwoCalls(),)))
    cell = report.cell("twice", "test:oracle")
    assert cell.model_calls == 2.0 and cell.tokens_in > 0 and cell.tokens_out > 0
    assert cell.successes == 5
