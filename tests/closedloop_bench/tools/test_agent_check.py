"""The live check of an agent change, on made-up reports and banks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from closedloop import ConfigurationError
from closedloop_bench.tools._agent_check import agent_check, report_lines
from closedloop_bench.tools._replay import Abstaining, Record, Sample, Votes
from closedloop_bench.tools._report import TaskResult, ToolsReport

from .conftest import BenchScript


def _result(task: str, strategy: str, success: bool, halt: str = "final") -> TaskResult:
    return TaskResult(
        task_id=task,
        family="irrelevance" if task.startswith("i") else "single",
        domain="d",
        strategy=strategy,
        model="m",
        success=success,
        reason="",
        calls=(),
        final_text="",
        model_calls=1 if halt == "abstained" else 2,
        tokens_in=10,
        tokens_out=5,
        wall_s=1.0,
        error=None,
        halt=halt,
    )


def _record(task: str, ok: bool, p_low: float, abstain_ok: bool) -> Record:
    sample = Sample(
        index=0, key="k", ok=ok, p_low=p_low, p_min=p_low, p_mean=p_low, tokens=10, seconds=1.0
    )
    family = "irrelevance" if task.startswith("i") else "single"
    return Record(task, family, "m", (sample,), abstain_ok=abstain_ok)


# Four irrelevance tasks the reference gets wrong and the gate declines (right), four
# single tasks both get right, one unsure right call the gate declines (its loss).
TASKS = [f"i{n}" for n in range(4)] + [f"s{n}" for n in range(5)]
RESULTS = (
    [_result(t, "closedloop", False) for t in TASKS[:4]]
    + [_result(t, "closedloop", True) for t in TASKS[4:]]
    + [_result(t, "gated", True, "abstained") for t in TASKS[:4]]
    + [_result(t, "gated", True) for t in TASKS[4:8]]
    + [_result("s4", "gated", False, "abstained")]
)
REPORT = ToolsReport(
    source="t", models=("m",), strategies={}, results=tuple(RESULTS), cells=(), wall_s=0.0
)
RECORDS = (
    [_record(t, False, 0.1, True) for t in TASKS[:4]]
    + [_record(t, True, 0.9, False) for t in TASKS[4:8]]
    + [_record("s4", True, 0.3, False)]
)


def test_the_check_pairs_the_live_rows_and_sets_the_replayed_change_beside_them() -> None:
    check = agent_check(
        REPORT,
        RECORDS,
        reference="closedloop",
        treated="gated",
        replay_reference=Votes(1),
        replay_treated=Abstaining(Votes(1), 0.4),
        abstain_below=0.4,
    )
    gated = check["live"]["gated"]
    assert (gated["success"], gated["abstained"], gated["abstained_right"]) == (8, 5, 4)
    assert gated["abstained_by_family"] == {"irrelevance": 4, "single": 1}
    assert check["live_paired"]["success"] == {"only_a": 4, "only_b": 1, "p": 0.375}
    assert check["live_paired"]["calls"]["mean"] == pytest.approx(-5 / 9)
    # The replay makes the same decisions here: +4 -1 on both sides, inside the interval.
    assert check["replay"]["success"] == {"single": 5, "single+abstain<0.4": 8}
    assert check["live_paired"]["difference"]["mean"] == pytest.approx(3 / 9)
    assert check["replayed_difference_inside_live_interval"] is True
    assert check["abstain_agreement"] == {"both": 5, "live_only": 0, "bank_only": 0, "neither": 4}
    # Five declined: four where no tool fits (+4), one the reference solved (-1); five
    # declined at random would gain 5/9 of (4 no-tool tasks - 5 solved ones).
    declines = check["declines_against_random"]
    assert (declines["declined"], declines["no_tool_fits_tasks"], declines["net_gain"]) == (5, 4, 3)
    assert declines["random_same_rate_net_gain"] == pytest.approx(round(5 / 9 * (4 - 5), 2))
    assert declines["above_random"] == pytest.approx(round(3 - 5 / 9 * (4 - 5), 2))
    lines = report_lines(check)
    assert any("McNemar p 0.375" in line for line in lines)
    assert any(line.startswith("declined 5: net +3") for line in lines)


def test_a_replayed_change_the_live_run_does_not_show_is_outside() -> None:
    same = [
        r if r.strategy == "closedloop" else _result(r.task_id, "gated", (r.task_id[0] == "s"))
        for r in RESULTS
    ]
    report = ToolsReport(
        source="t", models=("m",), strategies={}, results=tuple(same), cells=(), wall_s=0.0
    )
    check = agent_check(
        report,
        RECORDS,
        reference="closedloop",
        treated="gated",
        replay_reference=Votes(1),
        replay_treated=Abstaining(Votes(1), 0.4),
    )
    assert check["live_paired"]["difference"] == {"mean": 0.0, "low": 0.0, "high": 0.0}
    assert check["replayed_difference_inside_live_interval"] is False
    assert "abstain_agreement" not in check and "declines_against_random" not in check


def test_a_strategy_missing_from_the_report_is_named() -> None:
    with pytest.raises(ConfigurationError, match="strategy='votes'"):
        agent_check(
            REPORT,
            RECORDS,
            reference="closedloop",
            treated="votes",
            replay_reference=Votes(1),
            replay_treated=Votes(1),
        )


def test_the_script_checks_a_live_report_against_the_committed_bank(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    bench_script: BenchScript,
) -> None:
    root = Path(__file__).resolve().parents[3]
    bank = root / "bench/results/tools/bank/qwen2.5-coder-0.5b-eval.jsonl.gz"
    report = tmp_path / "r.json"
    args = [
        "--split",
        "eval",
        "--limit",
        "5",
        "--models",
        "test:oracle",
        "--strategies",
        "closedloop,gated",
        "--no-plot",
        "--no-progress",
        "--out",
        str(report),
    ]
    assert bench_script("tools").main(args) == 0
    out = tmp_path / "check.json"
    check = bench_script("tools_agent_check")
    assert check.main(["--report", str(report), "--bank", str(bank), "--out", str(out)]) == 0
    body = json.loads(out.read_text())
    assert body["n"] == 5 and body["live"]["gated"]["success"] == 5  # the oracle's calls
    assert body["replay"]["treated"] == "adaptive[p_low≥0.5, weighted]+abstain<0.4"
    assert body["command"].startswith("python bench/tools_agent_check.py --report")
    assert check.main(["--report", str(tmp_path / "none.json")]) == 2
    assert "--report=" in capsys.readouterr().err
    # Another change reads other rows: no `confident` row here, and no `x` row to refer to.
    assert check.main(["--change", "confident", "--report", str(report), "--bank", str(bank)]) == 2
    assert "strategy='confident'" in capsys.readouterr().err
    argv = ["--report", str(report), "--bank", str(bank), "--reference", "x"]
    assert check.main(argv) == 2
    assert "--reference='x': no such row (the report has closedloop, gated)" in (
        capsys.readouterr().err
    )


def test_the_confident_change_pairs_it_with_the_plain_loop(
    tmp_path: Path, bench_script: BenchScript
) -> None:
    root = Path(__file__).resolve().parents[3]
    bank = root / "bench/results/tools/bank/qwen2.5-coder-0.5b-eval.jsonl.gz"
    report = tmp_path / "r.json"
    args = ["--split", "eval", "--limit", "4", "--models", "test:oracle"]
    args += ["--strategies", "closedloop,confident", "--no-plot", "--no-progress"]
    assert bench_script("tools").main([*args, "--out", str(report)]) == 0
    out = tmp_path / "check.json"
    argv = ["--change", "confident", "--report", str(report), "--bank", str(bank)]
    argv += ["--out", str(out)]
    assert bench_script("tools_agent_check").main(argv) == 0
    body = json.loads(out.read_text())
    assert set(body["live"]) == {"closedloop", "confident"} and body["n"] == 4
    assert body["replay"]["treated"] == "adaptive[p_low≥0.5, weighted]"
    assert "abstain_agreement" not in body  # the confident call never abstains
    # The reference row may come from an earlier run of the same tasks.
    only_new = tmp_path / "new.json"
    args[args.index("closedloop,confident")] = "confident"
    assert bench_script("tools").main([*args, "--out", str(only_new)]) == 0
    argv = ["--change", "confident", "--report", str(only_new), "--bank", str(bank)]
    argv += ["--reference-report", str(report), "--out", str(out)]
    assert bench_script("tools_agent_check").main(argv) == 0
    again = json.loads(out.read_text())
    assert again["reference_report"] == str(report)
    assert again["live"]["closedloop"] == body["live"]["closedloop"]
    # Two runs' rows of one name (a strategy before and after a change) are kept apart.
    same = ["--change", "confident", "--report", str(only_new), "--bank", str(bank)]
    same += ["--reference", "confident", "--reference-report", str(only_new), "--out", str(out)]
    assert bench_script("tools_agent_check").main(same) == 0
    assert set(json.loads(out.read_text())["live"]) == {"confident", "confident (reference run)"}
    argv[argv.index(str(report))] = str(tmp_path / "gone.json")
    assert bench_script("tools_agent_check").main(argv) == 2
