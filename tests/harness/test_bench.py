"""``bench refine`` end to end on the refinement tasks, a scripted model, the real sandbox."""

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
    BenchConfig,
    LoopGainStop,
    RefineState,
    StopReason,
    _bench,
    render_report,
    run_refine_bench,
)
from closedloop.models import CallInfo, FunctionModel, Message

from . import solutions
from .conftest import fenced

ROOT = Path(__file__).resolve().parents[2]
BAD = {
    "spiral_order": "def spiral_order(m):\n    return [x for r in m for x in r]\n",
    "LRUCache": solutions.LRU_GET_NO_REFRESH,
}
GOOD = {"spiral_order": solutions.SPIRAL, "LRUCache": solutions.LRU}


def answer(messages: tuple[Message, ...], call: CallInfo) -> str:
    key = next(k for k in GOOD if k in messages[1].content)
    precise = len(messages) > 2 and "Failing tests:" in messages[-1].content
    return fenced(GOOD[key] if precise else BAD[key])


async def run_small(tmp_path: Path, **overrides: Any) -> tuple[_bench.BenchReport, FunctionModel]:
    model = FunctionModel(answer)
    options: dict[str, Any] = {"rounds": 3, "out": tmp_path / "out", **overrides}
    report = await run_refine_bench(
        BenchConfig(**options), model=model, tasks=[SPIRAL_MATRIX, LRU_CACHE]
    )
    return report, model


@pytest.mark.integration
async def test_bench_compares_strategies_on_shared_first_rounds(tmp_path: Path) -> None:
    report, model = await run_small(tmp_path)
    assert list(report.runs) == [
        "blind_retry",
        "self_refine",
        "pid",
        "pid_adaptive",
        "pid+interval2",
    ]
    # Round 1 (seed 0) is generated once per task, whatever the number of strategies.
    assert sum(1 for c in model.calls if c.seed == 0) == 2
    pid, refine = report.summary("pid"), report.summary("self_refine")
    assert pid["pass_rate_by_round"] == pytest.approx([0.55, 1.0, 1.0])
    assert refine["pass_rate_by_round"] == pytest.approx([0.55, 0.55, 0.55])
    assert pid["solved"] == 2 and pid["mean_rounds_to_pass"] == 2.0
    assert pid["evaluator_calls"] == 4 and pid["returned_regressed"] == 0
    interval = report.summary("pid+interval2")
    assert interval["pass_rate_by_round"] == pytest.approx([0.55, 0.55, 1.0])
    assert interval["evaluator_calls"] == 4
    # Completions repeat exactly across strategies and stop rules: the cache serves them.
    assert report.cache_hits > 0 and report.model_calls == len(model.calls)
    lines = _bench.target_lines(report)
    assert "pid - self_refine after round 3: +45.0 points (want >= +3): met" in lines[0]
    assert lines[-1] == "target: regressed outputs returned: 0 (want 0)"


@pytest.mark.integration
async def test_bench_writes_json_and_a_png(tmp_path: Path) -> None:
    report, _ = await run_small(tmp_path, strategies=("self_refine", "pid"))
    data = json.loads((tmp_path / "out" / "results.json").read_text())
    assert data["config"]["strategies"] == ["self_refine", "pid"]
    assert [s["strategy"] for s in data["summaries"]] == ["self_refine", "pid"]
    assert len(data["runs"]["pid"]) == 2
    # A per-token curve for each strategy: cumulative cost and pass rate after each round.
    for name in ("self_refine", "pid"):
        curve = data["curves"][name]
        assert [p["round"] for p in curve] == [1, 2, 3]
        tokens = [p["tokens"] for p in curve]
        assert tokens == sorted(tokens) and tokens[-1] == sum(
            r.prompt_tokens + r.completion_tokens for r in report.runs[name]
        )
        assert curve[-1]["pass_rate"] == pytest.approx(report.pass_rate_by_round(name)[-1])
    png = (tmp_path / "out" / "pass_rate_by_round.png").read_bytes()
    assert png.startswith(b"\x89PNG")
    console = Console(record=True, width=220)
    render_report(report, console)
    text = console.export_text()
    assert "Round 1 is shared by all strategies" in text
    assert "cached by exact prompt + parameters" in text
    assert "pass rate of the returned output after each round" in text


def _require_loopgain() -> ModuleType:
    module = _bench._loopgain()
    if module is None:
        pytest.fail("loopgain is not installed: `pip install loopgain==0.6.5` (the refine extra)")
    assert isinstance(module, ModuleType)
    return module


def test_loopgain_stop_with_the_real_package() -> None:
    module = _require_loopgain()
    assert module.__version__ == "0.6.5"
    stop = LoopGainStop(module=module)
    assert stop(RefineState(2, (0.7, 0.7))) is None
    decision = stop(RefineState(3, (0.7, 0.7, 0.7)))
    assert decision is not None and decision.reason is StopReason.EXTERNAL
    assert decision.detail == "loopgain: stalled"
    met = stop(RefineState(2, (0.5, 1.0)))
    assert met is not None and met.detail == "loopgain: converged"
    assert stop(RefineState(3, (0.5, 0.7, None))) is None


@pytest.mark.integration
async def test_loopgain_column_against_the_lyapunov_stop(tmp_path: Path) -> None:
    _require_loopgain()
    report, _ = await run_small(tmp_path, strategies=("self_refine",))
    names = list(report.stop_runs)
    assert names[0].startswith("closedloop") and names[1] == "loopgain 0.6.5"
    ours, theirs = (report.stop_summary(name) for name in names)
    # self-refine hands back the same program here: closedloop sees the fixed point after
    # round 2; loopgain needs a third flat score to call it stalled. Same final pass rate.
    assert (ours["mean_rounds"], ours["wasted_rounds"]) == (2.0, 2)
    assert (theirs["mean_rounds"], theirs["wasted_rounds"]) == (3.0, 4)
    assert ours["final_pass_rate"] == theirs["final_pass_rate"] == pytest.approx(0.55)
    assert ours["outcomes"] == {"fixed_point": 2}
    target = next(
        line for line in _bench.target_lines(report) if "rounds on the self-refine" in line
    )
    assert target.endswith("fewer at an equal pass rate: met")
    assert "closedloop stop 2.00 (pass rate 0.550) vs loopgain 0.6.5 3.00 (0.550)" in target
    assert report.loopgain_note is None


@pytest.mark.integration
async def test_bench_runs_without_loopgain(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_bench, "_loopgain", lambda: None)
    report, _ = await run_small(tmp_path, strategies=("pid",), rounds=2)
    assert list(report.stop_runs) == ["closedloop (target | Lyapunov | trajectory | fixed point)"]
    assert report.loopgain_note is not None and "unavailable" in report.loopgain_note


def test_bench_config_is_checked_before_any_model_call() -> None:
    with pytest.raises(ConfigurationError, match="strategy"):
        BenchConfig(strategies=("pid", "magic"))
    with pytest.raises(ConfigurationError, match="rounds"):
        BenchConfig(rounds=0)
    with pytest.raises(ConfigurationError, match="tasks"):
        BenchConfig(tasks="everything")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="threads"):
        BenchConfig(threads=0)
    for bad in ((0, 2), (3, 2)):
        with pytest.raises(ConfigurationError, match="shard"):
            BenchConfig(shard=bad)


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_refine", ROOT / "bench" / "refine.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bench_script_parses_the_cli_options() -> None:
    script = _script()
    config = script.parse_args(
        [
            "--tasks",
            "humaneval",
            "--limit",
            "5",
            "--strategies",
            "pid,self_refine",
            "--rounds",
            "3",
            "--temperature",
            "0",
            "--no-loopgain",
            "--cache",
            "/tmp/gens.sqlite",
            "--threads",
            "1",
            "--shard",
            "2/3",
        ]
    )
    assert (config.tasks, config.limit, config.strategies) == (
        "humaneval",
        5,
        ("pid", "self_refine"),
    )
    assert (config.rounds, config.temperature, config.loopgain) == (3, 0.0, False)
    assert (config.cache_path, config.threads) == (Path("/tmp/gens.sqlite"), 1)
    assert config.shard == (2, 3)
    with pytest.raises(SystemExit):
        script.parse_args(["--shard", "two"])
    assert script.parse_args([]).cache_path is None
    assert script.main(["--strategies", "magic"]) == 2
    assert script.main(["--model", "no-such-spec"]) == 2


def test_cli_sub_app_has_the_refine_command() -> None:
    from closedloop_bench.cli._bench import app

    result = CliRunner().invoke(app, ["refine", "--help"])
    assert result.exit_code == 0
    for option in ("--tasks", "--limit", "--strategies", "--rounds", "--model", "--out"):
        assert option in result.output
    bad = CliRunner().invoke(app, ["refine", "--tasks", "everything"])
    assert isinstance(bad.exception, ConfigurationError)


def test_cli_refine_passes_cache_and_threads_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from closedloop_bench.cli import _bench as cli_bench

    seen: list[BenchConfig] = []

    async def fake(config: BenchConfig, **kwargs: Any) -> None:
        seen.append(config)
        raise ConfigurationError("model", config.model, "not run in this test")

    monkeypatch.setattr(cli_bench, "run_refine_bench", fake)
    cache = tmp_path / "gens.sqlite"
    args = ["refine", "--tasks", "humaneval", "--cache", str(cache), "--threads", "1"]
    result = CliRunner().invoke(cli_bench.app, [*args, "--shard", "1/4"])
    assert isinstance(result.exception, ConfigurationError)
    assert [(c.tasks, c.cache_path, c.threads, c.shard) for c in seen] == [
        ("humaneval", cache, 1, (1, 4))
    ]
    CliRunner().invoke(cli_bench.app, ["refine"])
    assert (seen[-1].cache_path, seen[-1].threads, seen[-1].shard) == (None, None, None)
    bad = CliRunner().invoke(cli_bench.app, ["refine", "--shard", "half"])
    assert isinstance(bad.exception, ConfigurationError) and len(seen) == 2


@pytest.mark.integration
async def test_shards_on_one_cache_add_up_to_the_whole_run(tmp_path: Path) -> None:
    cache = tmp_path / "gens.sqlite"
    options: dict[str, Any] = {
        "rounds": 2,
        "strategies": ("pid",),
        "loopgain": False,
        "cache_path": cache,
    }
    tasks = [SPIRAL_MATRIX, LRU_CACHE]
    calls = 0
    for k in (1, 2):
        model = FunctionModel(answer)
        report = await run_refine_bench(
            BenchConfig(shard=(k, 2), **options), model=model, tasks=tasks
        )
        assert report.tasks == [tasks[k - 1].name]
        calls += len(model.calls)
    model = FunctionModel(answer)
    whole = await run_refine_bench(BenchConfig(**options), model=model, tasks=tasks)
    assert whole.tasks == [t.name for t in tasks]
    assert model.calls == [] and calls > 0  # every generation came from the shards
    assert whole.summary("pid")["solved"] == 2
