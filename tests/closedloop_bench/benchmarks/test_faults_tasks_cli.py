"""``closedloop bench faults --tasks FILE``: a tiny run on the example file with the test
model, ``--explain`` without a model, and a bad file as one line naming line and field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from closedloop.cli import main

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "faults_tasks.jsonl"
TINY = [
    "--model", "test:oracle", "--profiles", "none", "--steps", "1,3", "--episodes", "1",
    "--latency-scale", "0", "--tool-timeout", "30", "--no-cache",
    "--strategies", "open_loop,closedloop_pid", "--no-frontier", "--no-warnings",
]  # fmt: skip


def test_a_run_on_a_task_file_uses_its_tasks(tmp_path: Path) -> None:
    out = tmp_path / "faults"
    assert main(["bench", "faults", "--tasks", str(EXAMPLE), *TINY, "--out", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    ids = {json.loads(line)["id"] for line in EXAMPLE.read_text().splitlines()}
    assert {e["task_id"] for e in report["episodes"]} <= ids
    assert {e["steps"] for e in report["episodes"]} == {1, 3}
    assert report["config"]["tasks"] == str(EXAMPLE)


def test_explain_lists_the_tasks_and_loads_no_model(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["bench", "faults", "--tasks", str(EXAMPLE), "--model", "local:nope", "--explain"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "dev-s0-weather-weather_single-001: weather, 1 step(s), checker weather_report" in out
    assert f"10 task(s) from {EXAMPLE}\nevery ideal run passes its checker" in out


@pytest.mark.parametrize("explain", [True, False])
def test_a_bad_file_is_one_line(
    tmp_path: Path, explain: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = EXAMPLE.read_text(encoding="utf-8").splitlines()
    record = json.loads(lines[1])
    record["checker"] = "vibes"
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join([lines[0], json.dumps(record), *lines[2:]]) + "\n")
    args = ["bench", "faults", "--tasks", str(path), *TINY, "--out", str(tmp_path / "o")]
    assert main([*args, *(["--explain"] if explain else [])]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: TaskFileError:") and len(err.splitlines()) == 1
    assert "line 2, field checker: unknown checker 'vibes'" in err
    assert not (tmp_path / "o").exists()
