"""``closedloop demo``: the agent demo with the deterministic test model (the embedded model
is what ``make demo`` runs); ``closedloop demo control`` keeps working beside it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from closedloop.agent import read_trace
from closedloop.cli import main
from closedloop_bench.benchmarks import pick_demo_tasks

FAST = ["--model", "test:oracle", "--latency-scale", "0", "--tool-timeout", "30"]


@pytest.mark.parametrize("command", [["demo"], ["demo", "agents", "--no-cache"]])
def test_the_agent_demo_compares_open_and_closed_loop_and_writes_its_files(
    command: list[str],
    tmp_path: Path,
    closedloop_home: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "runs"
    code = main([*command, *FAST, "--tasks", "4", "--profile", "none", "--out", str(out)])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "open loop" in printed and "closed loop (PID+ADRC)" in printed
    assert "real time:" in printed
    (run,) = list(out.iterdir())
    assert run.name.startswith("demo-")
    report = json.loads((run / "report.json").read_text())
    assert len(report["tasks"]) == 4 and len(report["episodes"]) == 8
    assert {c["strategy"] for c in report["summary"]} == {"open_loop", "closedloop_adrc"}
    assert all(e["success"] for e in report["episodes"])  # a clean world, a perfect planner
    records, _ = read_trace(run / "trace.jsonl")
    assert records and {r.task_id for r in records}  # one record per closed-loop step
    assert (run / "control.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_demo_under_faults_reports_failures_of_the_open_loop(
    tmp_path: Path, closedloop_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = tmp_path / "always-first.json"
    profile.write_text(json.dumps({"default": {"outages": [{"start": 0, "end": 1}]}}))
    out = tmp_path / "runs"
    code = main(["demo", *FAST, "--tasks", "4", "--profile", str(profile), "--out", str(out)])
    assert code == 0
    (run,) = list(out.iterdir())
    episodes = json.loads((run / "report.json").read_text())["episodes"]
    possible = [e for e in episodes if not e["impossible"]]
    assert not any(e["success"] for e in possible if e["strategy"] == "open_loop")
    assert all(e["success"] for e in possible if e["strategy"] == "closedloop_adrc")


def test_demo_tasks_are_short_and_take_turns_across_domains() -> None:
    tasks = pick_demo_tasks(8)
    assert len({t.domain for t in tasks[:4]}) == 4  # one of each domain, then again
    assert [t.domain for t in tasks[4:]] == [t.domain for t in tasks[:4]]
    assert all(t.expected_steps <= 2 for t in tasks) and len({t.id for t in tasks}) == 8


def test_demo_control_still_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "control", "--out", str(tmp_path)]) == 0
    assert "ladrc-1st" in capsys.readouterr().out
