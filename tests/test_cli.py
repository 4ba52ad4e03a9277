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


def test_bench_demo_and_world_come_from_closedloop_bench(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from closedloop.cli._plugins import ENTRY_POINT_GROUP
    from closedloop_bench.cli import bench_app

    assert ENTRY_POINT_GROUP == "closedloop.cli"
    assert main(["bench", "--help"]) == 0
    printed = capsys.readouterr().out
    for command in ("faults", "overhead", "refine"):
        assert command in printed
    assert {c.name for c in bench_app.registered_commands} >= {"faults", "overhead", "refine"}


def test_without_closedloop_bench_its_commands_say_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import typer
    from typer.testing import CliRunner

    from closedloop import ClosedLoopError
    from closedloop.cli import _plugins

    monkeypatch.setattr(_plugins, "entry_points", lambda group: [])
    app = typer.Typer()
    app.command("version")(lambda: None)  # a group needs one command of its own
    assert _plugins.add_plugin_commands(app) == []
    for argv in (["bench", "faults", "--quick"], ["demo"], ["world", "serve", "--port", "0"]):
        result = CliRunner().invoke(app, argv)
        assert isinstance(result.exception, ClosedLoopError), argv
        assert "pip install closedloop-bench" in str(result.exception)
        assert argv[0] in str(result.exception)
