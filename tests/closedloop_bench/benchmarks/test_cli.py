"""``closedloop bench faults`` and ``overhead`` from the command line, with the test model
(seconds, not minutes), and the scripts in bench/ that wrap them."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

from typer.testing import CliRunner

from closedloop_bench.cli._bench import app

ROOT = Path(__file__).resolve().parents[3]


def script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


TINY = [
    "--model", "test:oracle", "--profiles", "none", "--steps", "1,2", "--episodes", "1",
    "--latency-scale", "0", "--tool-timeout", "30", "--no-cache", "--no-frontier",
    "--no-warnings",
]  # fmt: skip


def test_a_tiny_faults_run_prints_the_tables_and_writes_its_files(tmp_path: Path) -> None:
    out = tmp_path / "faults"
    result = CliRunner().invoke(app, ["faults", *TINY, "--out", str(out)])
    assert result.exit_code == 0, result.output
    for text in ("open_loop", "closedloop_adrc", "oracle bound", "wall time"):
        assert text in result.output
    report = json.loads((out / "report.json").read_text())
    assert len(report["episodes"]) == 2 * 6 and report["config"]["profiles"] == ["none"]
    # The recorded command is the one given, options and all, and rewrites this file.
    recorded = report["command"].split()
    assert recorded[:3] == ["closedloop", "bench", "faults"]
    assert recorded[recorded.index("--out") + 1] == str(out)
    for i, token in enumerate(TINY):
        if not token.startswith("--"):
            continue
        assert token in recorded, token
        given = TINY[i + 1] if i + 1 < len(TINY) and not TINY[i + 1].startswith("--") else None
        if given is not None:
            value = recorded[recorded.index(token) + 1]
            assert value == given or float(value) == float(given), token
    assert (out / "curves.png").stat().st_size > 1000


def test_bad_options_are_one_clear_error(tmp_path: Path) -> None:
    bad_steps = CliRunner().invoke(app, ["faults", *TINY, "--steps", "1,eleven"])
    assert bad_steps.exit_code != 0 and "--steps" in str(bad_steps.exception)
    faults = script("faults")
    assert faults.main([*TINY, "--strategies", "magic", "--out", str(tmp_path)]) == 2
    assert faults.main(["--model", "test:nonsense", "--out", str(tmp_path)]) == 2


def test_the_faults_script_runs_the_same_command(tmp_path: Path) -> None:
    out = tmp_path / "script"
    assert script("faults").main([*TINY, "--strategies", "open_loop", "--out", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    assert {e["strategy"] for e in report["episodes"]} == {"open_loop"}


def test_overhead_command_writes_its_report(tmp_path: Path) -> None:
    out = tmp_path / "overhead"
    code = script("overhead").main(["--steps", "2", "--rounds", "3", "--out", str(out)])
    assert code == 0
    report = json.loads((out / "overhead.json").read_text())
    assert [r["loop"] for r in report["rows"]][:2] == ["plain while loop", "LangGraph StateGraph"]
    assert all(r["cpu_us"] is not None and r["cpu_us"] > 0 for r in report["rows"])


# --- every option given is used, or refused with the reason --------------------------

FAST = [
    "--model", "test:oracle", "--latency-scale", "0", "--tool-timeout", "30", "--no-cache",
    "--no-frontier", "--no-warnings",
]  # fmt: skip


def test_quick_runs_on_the_profiles_and_steps_given(tmp_path: Path) -> None:
    out = tmp_path / "quick"
    args = ["faults", "--quick", *FAST, "--profiles", "none", "--steps", "1"]
    result = CliRunner().invoke(app, [*args, "--strategies", "open_loop", "--out", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads((out / "report.json").read_text())
    config = report["config"]
    assert config["quick"] is True
    assert config["profiles"] == ["none"] and config["steps"] == [1]
    assert {e["profile"] for e in report["episodes"]} == {"none"}
    assert len(report["episodes"]) == config["episodes"] == 3  # quick: few episodes


def test_an_option_that_would_change_nothing_is_refused() -> None:
    result = CliRunner().invoke(
        app, ["faults", *FAST, "--strategies", "open_loop", "--closed-loop", "reference"]
    )
    assert result.exit_code != 0
    assert "--closed-loop" in str(result.exception) and "has none" in str(result.exception)


def test_an_unknown_profile_or_rate_is_refused_before_any_episode(tmp_path: Path) -> None:
    for profile, needle in [("stormy", "stormy"), ("regimes@1.5", "1.5"), ("regimes@x", "'x'")]:
        result = CliRunner().invoke(
            app, ["faults", *FAST, "--profiles", profile, "--out", str(tmp_path / "no")]
        )
        assert result.exit_code != 0, profile
        assert needle in str(result.exception), (profile, result.exception)
        assert not (tmp_path / "no").exists()  # nothing ran, nothing written


def test_a_run_on_regimes_writes_their_ground_truth_with_each_episode(tmp_path: Path) -> None:
    profile = tmp_path / "flappy.json"
    profile.write_text(json.dumps({"regimes": {"onset_rate": 1.0}}))
    out = tmp_path / "regimes"
    args = [*FAST, "--profiles", str(profile), "--steps", "5,7", "--episodes", "2"]
    result = CliRunner().invoke(
        app, ["faults", *args, "--strategies", "open_loop", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    episodes = json.loads((out / "report.json").read_text())["episodes"]
    changes = [c for e in episodes for c in e["regime_changes"]]
    assert changes
    assert set(changes[0]) == {"service", "index", "t_s", "from_regime", "to_regime"}
    assert all(c["from_regime"] != c["to_regime"] for c in changes)


# --- the λ sweep and the artefacts after the table --------------------------------------


def test_lambdas_add_their_regimes_profiles_and_draw_the_curve(tmp_path: Path) -> None:
    out = tmp_path / "lambdas"
    args = [*FAST, "--profiles", "none", "--lambdas", "0,0.3", "--steps", "1", "--episodes", "1"]
    args += ["--strategies", "closedloop_pid,closedloop_frozen", "--out", str(out)]
    result = CliRunner().invoke(app, ["faults", *args])
    assert result.exit_code == 0, result.output
    report = json.loads((out / "report.json").read_text())
    assert report["config"]["profiles"] == ["none", "regimes@0", "regimes@0.3"]  # none kept
    (curve,) = report["lambda_curves"]
    assert curve["base"] == "regimes" and curve["lambdas"] == [0.0, 0.3]
    assert set(curve["points"]["closedloop_pid"]) == {"0", "0.3"}
    pairs = {(p["profile"], p["strategy"]) for p in report["on_vs_frozen"]}
    assert ("regimes@0.3", "closedloop_pid") in pairs and ("none", "closedloop_pid") in pairs
    assert (out / "lambda.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert any("regime chain" in note for note in report["notes"])  # the oracle plays it
    for needle in ("against λ (regimes@λ)", "controller on vs frozen", "lambda.png"):
        assert needle in result.output, needle


def test_a_rate_outside_zero_to_one_is_refused_by_its_value(tmp_path: Path) -> None:
    for rates, needle in [("0.1,1.5", "1.5"), ("0.2,x", "'x'"), ("-0.1", "-0.1"), (",", "','")]:
        result = CliRunner().invoke(
            app, ["faults", *FAST, "--lambdas", rates, "--out", str(tmp_path / "no")]
        )
        assert result.exit_code != 0, rates
        assert "--lambdas" in str(result.exception) and needle in str(result.exception), rates
        assert not (tmp_path / "no").exists()


def test_one_command_writes_the_claims_the_frontier_and_the_early_warning(tmp_path: Path) -> None:
    out = tmp_path / "all"
    args = ["faults", "--quick", "--model", "test:oracle", "--latency-scale", "0.05"]
    args += ["--tool-timeout", "30", "--no-cache", "--profiles", "none", "--steps", "1"]
    args += ["--episodes", "1", "--strategies", "open_loop,fixed_retries,closedloop_pid"]
    result = CliRunner().invoke(app, [*args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    for needle in (
        "judged like for like",
        "success and cost per episode",
        "early warning on regime onsets",
    ):
        assert needle in result.output, needle
    sweep = json.loads((out / "sweep.json").read_text())
    assert sweep["config"]["profiles"] == ["regimes@0.2"] and sweep["config"]["steps"] == [1]
    assert sweep["config"]["attempts_swept"] == [1, 3, 5]  # quick: the reduced grid
    assert (out / "frontier.png").stat().st_size > 1000
    warned = json.loads((out / "early_warning.json").read_text())
    assert warned["config"]["steps"] == [1] and warned["config"]["episodes"] == 1
    assert warned["config"]["profiles"] == ["regimes@0.1", "regimes@0.2"]


def test_budget_records_the_line_that_rewrites_its_sweep(tmp_path: Path) -> None:
    out = tmp_path / "budget"
    args = ["--profiles", "none", "--steps", "1", "--episodes", "1", "--attempts", "1,2"]
    args += ["--backoffs", "0.1", "--adaptive", "closedloop_pid"]
    result = CliRunner().invoke(app, ["budget", *args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    sweep = json.loads((out / "sweep.json").read_text())
    assert sweep["command"] == f"closedloop bench budget {' '.join(args)} --out {out}"
