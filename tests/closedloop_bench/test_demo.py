"""``closedloop demo``: the agent demo with the deterministic test model (the embedded model
is what ``make demo`` runs): the same model, tools and prompts with the loop open, closed
and frozen, on tool-calling and world tasks; ``closedloop demo control`` keeps working."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from closedloop.agent import read_trace
from closedloop.cli import main
from closedloop_bench.benchmarks import pick_demo_tasks
from closedloop_bench.benchmarks._demo_rows import ROW_LABELS, pick_tool_tasks
from closedloop_bench.tools import FAMILIES

FAST = ["--model", "test:oracle", "--latency-scale", "0", "--tool-timeout", "30"]


ROWS = ["open", "closed", "frozen"]


@pytest.mark.parametrize("command", [["demo"], ["demo", "agents", "--no-cache"]])
def test_the_agent_demo_compares_the_loop_open_closed_and_frozen_side_by_side(
    command: list[str],
    tmp_path: Path,
    closedloop_home: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out, results = tmp_path / "runs", tmp_path / "results" / "demo.json"
    args = ["--tasks", "4", "--tool-tasks", "5", "--profile", "none", "--out", str(out)]
    code = main([*command, *FAST, *args, "--results", str(results)])
    printed = capsys.readouterr().out
    assert code == 0, printed
    for label in ROW_LABELS.values():
        assert label in printed
    assert "tool calling (5 tasks)" in printed and "world (4 tasks)" in printed
    assert "real time:" in printed
    # The demo leads with every eval task, replayed from the committed sample bank.
    assert printed.index("420 tool-calling eval tasks") < printed.index("tool calling (5 tasks)")
    (run,) = list(out.iterdir())
    assert run.name.startswith("demo-")
    report = json.loads((run / "report.json").read_text())
    assert json.loads(results.read_text())["rows"] == report["rows"]
    rows = {(r["suite"], r["row"]): r for r in report["rows"]}
    expected = [*(("tools", r) for r in ROWS), *(("world", r) for r in [*ROWS, "reference"])]
    assert list(rows) == expected
    assert rows["world", "reference"]["label"] == "rules-first reference agents"
    assert all(r["label"] != "closed loop" for r in report["rows"])
    # A perfect planner on a clean world: every row that lets the model decide succeeds.
    for key in [("tools", r) for r in ROWS] + [("world", r) for r in ROWS]:
        assert rows[key]["successes"] == rows[key]["tasks"], key
    assert rows["tools", "open"]["model_calls"] == 1.0
    assert rows["tools", "closed"]["model_calls"] > 1.0  # one call a reply, then the answer
    assert len(report["tool_results"]) == 5 * 3 and len(report["tool_tasks"]) == 5
    assert len(report["tasks"]) == 4 and len(report["episodes"]) == 4 * 4
    records, _ = read_trace(run / "trace.jsonl")
    assert records and {r.task_id for r in records}  # one record per closed-loop step
    assert (run / "control.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    lead = report["lead"]
    assert lead["n"] == 420 and lead["rows"][0]["name"] == "single"
    assert [r["name"] for r in lead["rows"][2:]] == [
        lead["settings"]["confident"],
        lead["settings"]["abstain"],
    ]


def test_the_tool_tasks_take_the_families_in_turn_and_spread_the_domains() -> None:
    tasks = pick_tool_tasks(12)
    assert [t.family for t in tasks[:5]] == list(FAMILIES)
    assert len({t.id for t in tasks}) == 12 and len({t.domain for t in tasks}) >= 10
    assert pick_tool_tasks(12) == tasks  # a fixed subset


def test_the_demo_under_faults_reports_failures_of_the_open_loop(
    tmp_path: Path, closedloop_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = tmp_path / "always-first.json"
    profile.write_text(json.dumps({"default": {"outages": [{"start": 0, "end": 1}]}}))
    out = tmp_path / "runs"
    args = ["--tasks", "4", "--tool-tasks", "0", "--profile", str(profile), "--out", str(out)]
    code = main(["demo", *FAST, *args])
    assert code == 0
    (run,) = list(out.iterdir())
    report = json.loads((run / "report.json").read_text())
    possible = [e for e in report["episodes"] if not e["impossible"]]
    assert not any(e["success"] for e in possible if e["strategy"] == "open_loop")
    assert all(e["success"] for e in possible if e["strategy"] == "closedloop_model_pid")
    assert [r["suite"] for r in report["rows"]] == ["world"] * 4  # no tool-calling tasks


def test_demo_tasks_are_short_and_take_turns_across_domains() -> None:
    tasks = pick_demo_tasks(8)
    assert len({t.domain for t in tasks[:4]}) == 4  # one of each domain, then again
    assert [t.domain for t in tasks[4:]] == [t.domain for t in tasks[:4]]
    assert all(t.expected_steps <= 2 for t in tasks) and len({t.id for t in tasks}) == 8


def test_demo_control_still_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "control", "--out", str(tmp_path)]) == 0
    assert "ladrc-1st" in capsys.readouterr().out
