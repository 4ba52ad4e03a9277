"""The command line: the control demo writes its artefacts; bad input is one clear line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from closedloop.cli import main


def test_demo_control_writes_table_plot_and_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo", "control", "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert "ladrc-1st" in printed and "pid-clamp" in printed
    (run_dir,) = list(tmp_path.iterdir())
    png = run_dir / "control.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    report = json.loads((run_dir / "report.json").read_text())
    names = {row["scenario"] for row in report}
    assert {
        "pid-none",
        "pid-clamp",
        "pid-conditional",
        "pid-backcalc",
        "ladrc-1st",
        "ladrc-2nd",
    } <= names


def test_unknown_command_is_a_usage_error_not_a_traceback() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "closedloop", "no-such-command"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "No such command" in proc.stderr
    assert "Traceback" not in proc.stderr
