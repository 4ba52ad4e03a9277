"""The success–cost plane's statistics and the replay command on a synthetic bank."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from closedloop import ConfigurationError
from closedloop_bench.benchmarks._stats import wilson_interval
from closedloop_bench.tools._plane import (
    Row,
    frontier,
    mcnemar_exact,
    paired_bootstrap,
    plane_report,
)
from closedloop_bench.tools._replay import Outcome

from .conftest import BenchScript


def _outcomes(successes: list[bool], seconds: list[float]) -> tuple[Outcome, ...]:
    return tuple(
        Outcome(f"t{i}", "single", ok, True, s, 10, 1)
        for i, (ok, s) in enumerate(zip(successes, seconds, strict=True))
    )


def test_mcnemar_exact_counts_discordant_pairs() -> None:
    assert mcnemar_exact([False] * 6, [True] * 6) == {"only_a": 0, "only_b": 6, "p": 0.03125}
    # 1 against 2 discordant: two-sided tail (1 + 3) / 8, doubled, capped at 1.
    assert mcnemar_exact([True, False, False], [False, True, True])["p"] == 1.0
    assert mcnemar_exact([True], [True])["p"] == 1.0
    with pytest.raises(ConfigurationError, match="one verdict per task"):
        mcnemar_exact([True], [True, False])


def test_paired_bootstrap_of_a_constant_difference_is_that_constant() -> None:
    out = paired_bootstrap([3.0, 4.0, 5.0], [2.0, 3.0, 4.0])
    assert out == {"mean": 1.0, "low": 1.0, "high": 1.0}
    spread = paired_bootstrap([0.0, 10.0] * 20, [0.0] * 40, seed=1)
    assert spread["low"] < 5.0 < spread["high"]


def test_the_plane_pairs_each_row_with_the_reference() -> None:
    single = Row("single", "m", "fixed", _outcomes([True, False, True, False, True], [2.0] * 5))
    votes = Row("votes@3", "m", "fixed", _outcomes([True, True, False, False, False], [3.1] * 5))
    quick = Row("adaptive[x]", "m", "adaptive", _outcomes([True] * 4 + [False], [2.5] * 5))
    report = plane_report([single, votes, quick], "m · single", resamples=200)
    rows = {r["name"]: r for r in report["rows"]}
    assert rows["single"]["success_ci"] == list(wilson_interval(3, 5))
    assert rows["single"]["vs_reference"] is None
    paired = rows["votes@3"]["vs_reference"]
    assert paired["success"] == {"only_a": 1, "only_b": 2, "p": 1.0}
    assert paired["seconds"]["mean"] == pytest.approx(1.1)
    assert paired["seconds"]["separated"] == 1.0
    assert report["frontier"] == ["m · single"]
    # 4/5 at 2.5 s against the best fixed setting that costs no more (single, 3/5).
    assert rows["adaptive[x]"]["above_frontier_by"] == pytest.approx(0.2)
    with pytest.raises(ConfigurationError, match="is not a row"):
        plane_report([single], "m · nothing")


def test_frontier_keeps_the_settings_nothing_beats() -> None:
    stats = [
        {"name": "a", "model": "m", "group": "fixed", "success_rate": 0.5, "mean_seconds": 1.0},
        {"name": "b", "model": "m", "group": "fixed", "success_rate": 0.7, "mean_seconds": 3.0},
        {"name": "c", "model": "m", "group": "fixed", "success_rate": 0.6, "mean_seconds": 4.0},
        {"name": "d", "model": "m", "group": "adaptive", "success_rate": 0.9, "mean_seconds": 0.5},
    ]
    assert frontier(stats) == ["m · a", "m · b"]


def test_the_replay_command_writes_the_three_reports(
    synthetic_banks: tuple[Path, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    bench_script: BenchScript,
) -> None:
    module = bench_script("tools_replay")
    strong, weak = synthetic_banks
    out = tmp_path / "out"
    argv = ["--bank", str(strong), "--weak-bank", str(weak), "--out-dir", str(out)]
    assert module.main(argv) == 0
    plane = json.loads((out / "plane.json").read_text())
    assert plane["command"].startswith("python bench/tools_replay.py --bank ")
    assert plane["n"] == 5 and plane["reference"] == "qwen2.5-coder-0.5b · single"
    rows = {f"{r['model']} · {r['name']}": r for r in plane["rows"]}
    assert rows["qwen2.5-coder-0.5b · single"]["success"] == 3
    assert rows["qwen2.5-coder-0.5b · votes@3"]["success"] == 2
    cascade = rows["smollm2-135m → qwen2.5-coder-0.5b · cascade[p_low≥0.5] 1→1"]
    assert cascade["success"] == 4 and cascade["mean_seconds"] == pytest.approx(1.8)
    assert cascade["escalated"] == 2
    # On the synthetic bank the p_low cascade at 0.5 beats Qwen's single call (4 > 3) at
    # 1.8 s against 2.0 s: more than 60 % of its seconds, so that target is not met.
    assert plane["targets"]["cascade"] == {"met": False, "by": []}
    confident = plane["targets"]["confident"]["qwen2.5-coder-0.5b"]
    assert confident["met"] is True  # every confident row solves 3/5, as single does
    risk = rows["qwen2.5-coder-0.5b · risk[α=0.1]"]
    assert 0.0 <= risk["coverage"] <= 1.0
    stream = json.loads((out / "stream.json").read_text())
    assert stream["alpha"] == 0.1 and stream["stream"]["model_switch_at"] == 3
    assert {r["kind"] for r in stream["runs"].values()} == {"fixed", "hindsight", "controller"}
    assert all(len(r["threshold"]) == 5 for r in stream["runs"].values())
    assert set(stream["target"]) == {
        "controller_within_3_points",
        "tuned_fixed_misses_by_10_points",
        "met",
    }
    calibration = json.loads((out / "calibration-bank.json").read_text())
    assert set(calibration["models"]) == {"qwen2.5-coder-0.5b", "smollm2-135m"}
    assert calibration["models"]["qwen2.5-coder-0.5b"]["overall"]["n"] == 5
    for png in ("plane.png", "stream.png", "calibration-bank-smollm2-135m.png"):
        assert (out / png).stat().st_size > 1000
    assert "plane:" in capsys.readouterr().out
    assert module.main(["--bank", str(tmp_path / "missing.jsonl.gz"), "--out-dir", str(out)]) == 2


def test_a_bank_recorded_further_gets_its_own_plane_on_all_its_tasks(tmp_path: Path) -> None:
    from closedloop_bench.tools._generate import DATA_DIR
    from closedloop_bench.tools._replay_command import ReplayOptions, run_replay

    from .conftest import (
        STRONG_SECONDS,
        SYNTHETIC_STRONG,
        SYNTHETIC_WEAK,
        WEAK_SECONDS,
        write_synthetic_bank,
    )

    strong = write_synthetic_bank(
        tmp_path / "q.jsonl.gz", "qwen2.5-coder-0.5b", SYNTHETIC_STRONG, STRONG_SECONDS
    )
    weak = write_synthetic_bank(
        tmp_path / "s.jsonl.gz", "smollm2-135m", SYNTHETIC_WEAK[:3], WEAK_SECONDS
    )
    out = tmp_path / "out"
    options = ReplayOptions(
        bank=strong, weak_bank=weak, tasks=DATA_DIR / "eval.jsonl", out_dir=out, command="x"
    )
    paths = run_replay(options, say=lambda _: None)
    assert json.loads((out / "plane.json").read_text())["n"] == 3
    own = json.loads(paths["plane_qwen2.5-coder-0.5b"].read_text())
    assert own["n"] == 5 and {r["model"] for r in own["rows"]} == {"qwen2.5-coder-0.5b"}
    assert "plane_smollm2-135m" not in paths


def test_a_development_bank_picks_settings_calibrates_and_tunes_the_stream(
    synthetic_banks: tuple[Path, Path], tmp_path: Path
) -> None:
    from closedloop import ConfigurationError
    from closedloop_bench.tools._generate import DATA_DIR
    from closedloop_bench.tools._replay_command import ReplayOptions, run_replay

    strong, weak = synthetic_banks
    eval_tasks = DATA_DIR / "eval.jsonl"
    # The synthetic banks stand in for development banks too (their tasks are eval tasks).
    options = ReplayOptions(
        bank=strong,
        weak_bank=weak,
        dev_bank=strong,
        dev_weak_bank=weak,
        dev_tasks=eval_tasks,
        out_dir=tmp_path / "out",
        command="x",
    )
    paths = run_replay(options, say=lambda _: None)
    plane = json.loads(paths["plane"].read_text())
    assert set(plane["chosen_on_development"]) == {"qwen2.5-coder-0.5b", "smollm2-135m"}
    assert plane["development_banks"]["qwen2.5-coder-0.5b"] == {"n": 5}
    calibration = json.loads(paths["calibration"].read_text())
    qwen = calibration["models"]["qwen2.5-coder-0.5b"]
    assert "p_low_calibrated" in qwen["sensors"]
    # Fitted and judged on the same five tasks, the isotonic map cannot rank worse.
    assert qwen["overall"]["p_low_calibrated"]["auroc"] >= qwen["overall"]["p_low"]["auroc"]
    assert qwen["overall"]["p_low_calibrated"]["ece"] <= qwen["overall"]["p_low"]["ece"]
    stream = json.loads(paths["stream"].read_text())
    assert stream["development_stream"]["n"] == 5
    assert any("chosen on the development stream" in k for k in stream["runs"])
    with pytest.raises(ConfigurationError, match="needs --dev-bank"):
        run_replay(
            ReplayOptions(bank=strong, dev_weak_bank=weak, out_dir=tmp_path / "o2"),
            say=lambda _: None,
        )


def test_the_agents_confident_call_is_set_against_its_own_models_fixed_rows() -> None:
    from closedloop_bench.tools._replay_command import agent_confident_report

    def row(name: str, group: str, wins: list[bool], calls: int, model: str = "m") -> Row:
        outs = tuple(
            Outcome(f"t{i}", "single", ok, True, 1.0, 10, calls) for i, ok in enumerate(wins)
        )
        return Row(name, model, group, outs)

    single = row("single", "fixed", [True, False, False, False], 1)
    votes = row("votes@3", "fixed", [True, True, True, True], 3)  # more calls: not a rival
    default = row("adaptive[agent: x]", "adaptive", [True, True, False, False], 2)
    other = row("single", "fixed", [True] * 4, 1, model="other")  # another model's row
    report = agent_confident_report([single, votes, default, other])
    assert set(report) == {"m"}
    mine = report["m"]
    assert (mine["success"], mine["single"], mine["mean_calls"]) == (2, 1, 2.0)
    assert mine["paired_with_single"] == {"only_a": 1, "only_b": 0, "p": 1.0}
    assert mine["best_fixed_at_no_more_calls"]["name"] == "single"
    assert mine["above_own_frontier_by"] == 0.25
