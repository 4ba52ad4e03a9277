"""`closedloop trace show RUN` and `closedloop plot RUN` on real run directories."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from closedloop.agent._records import (
    ActionCall,
    HaltReason,
    RunResult,
    RunUsageSummary,
    StepRecord,
)
from closedloop.agent._trace import JsonlTrace
from closedloop.cli import main


def record(step: int, **overrides: Any) -> StepRecord:
    fields: dict[str, Any] = {
        "run_id": "run-cli",
        "task_id": "book-flight",
        "step": step,
        "t_s": 0.75 * (step + 1),
        "phase": "search",
        "mode": "react",
        "step_type": "search_flights",
        "action": ActionCall(tool="search_flights", arguments={"to": "CDG"}),
        "observation": {"status": "empty", "confidence": 0.0},
        "error": 0.5,
        "control": 0.25,
        "quality": 0.5,
        "f_est": 0.45,
        "protocol": "dual_verification",
        "notes": ["widened the date range"],
        "repeat_count": step,
    }
    fields.update(overrides)
    return StepRecord(**fields)


def steps() -> list[StepRecord]:
    return [
        record(0),
        record(1, validation_errors=["date: not a date"]),
        record(
            2,
            action=None,
            final_answer="CA933 on 3 May",
            observation=None,
            protocol="normal",
            notes=[],
            halt=HaltReason.FINAL,
        ),
    ]


async def _write(run_id: str, records: list[StepRecord], result: RunResult | None) -> Path:
    trace = JsonlTrace.for_run(run_id)
    for r in records:
        await trace.write(r)
    if result is not None:
        await trace.close(result)
    return trace.path


def write_run(run_id: str = "run-cli", *, finished: bool = True) -> Path:
    records = steps()
    result = RunResult(
        run_id=run_id,
        task_id="book-flight",
        halt_reason=HaltReason.FINAL,
        success=True,
        answer="CA933 on 3 May",
        steps=records,
        usage=RunUsageSummary(model_calls=3, prompt_tokens=420, completion_tokens=64),
    )
    return asyncio.run(_write(run_id, records, result if finished else None))


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "220")


def test_show_prints_the_timeline_and_a_summary(
    closedloop_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_run()
    assert main(["trace", "show", "run-cli"]) == 0
    out = capsys.readouterr().out
    for expected in (
        "search_flights",
        '{"to": "CDG"}',
        "empty 0.00",
        "invalid: date: not a date",
        "final: CA933 on 3 May",
        "dual-verify",
        "widened the date range",
        "repeat ×1",
        "halt: final",
        "0.50  0.25   0.45",
        "2.25",
    ):
        assert expected in out, expected
    summary = out.strip().splitlines()[-1]
    assert summary.startswith("run run-cli (task book-flight): 3 steps, halt final, success")
    assert "3 model calls, 420 in / 64 out tokens" in summary
    assert "answer: CA933 on 3 May" in summary


def test_show_last_and_a_run_still_going(
    closedloop_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = write_run("live", finished=False)
    assert main(["trace", "show", str(trace), "--last", "1"]) == 0
    out = capsys.readouterr().out
    assert "final: CA933" in out and "search_flights" not in out
    assert "run run-cli: 3 steps, no result yet" in out


def test_show_warns_about_a_truncated_line_and_goes_on(
    closedloop_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = write_run(finished=False)
    with trace.open("a") as f:
        f.write('{"run_id": "run-cli", "task_')
    assert main(["trace", "show", str(trace.parent)]) == 0
    captured = capsys.readouterr()
    assert "skipped a truncated last line (line 4" in captured.err
    assert "3 steps" in captured.out


def test_plot_writes_control_png_into_the_run_dir(
    closedloop_home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = write_run()
    assert main(["plot", "run-cli"]) == 0
    png = trace.parent / "control.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert str(png) in capsys.readouterr().out

    elsewhere = tmp_path / "figs" / "run.png"
    assert main(["plot", str(trace), "--out", str(elsewhere)]) == 0
    assert elsewhere.read_bytes()[:4] == b"\x89PNG"


def test_plot_of_a_run_without_steps_is_an_error(
    closedloop_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    asyncio.run(
        _write(
            "empty",
            [],
            RunResult(run_id="empty", task_id="t", halt_reason=HaltReason.DEADLINE, success=False),
        )
    )
    assert main(["plot", "empty"]) == 2
    assert "no steps to plot" in capsys.readouterr().err
    assert main(["trace", "show", "empty"]) == 0
    out = capsys.readouterr().out
    assert "no steps recorded" in out and "halt deadline, not a success" in out


@pytest.mark.parametrize("command", [["trace", "show"], ["plot"]])
def test_unknown_or_garbage_runs_are_one_line_exit_2(
    closedloop_home: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    command: list[str],
) -> None:
    # The message is one line; the root console may wrap it at the terminal's width.
    assert main([*command, "nope"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert err.startswith("error: ConfigurationError: RUN='nope': no run found")
    assert "looked at" in err and "Traceback" not in err

    garbage = tmp_path / "garbage.jsonl"
    garbage.write_bytes(b"\x00\x01 definitely not json\n")
    assert main([*command, str(garbage)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "is not a closedloop trace" in err and "Traceback" not in err


def test_the_installed_command_line_end_to_end(closedloop_home: Path, tmp_path: Path) -> None:
    write_run()
    env = {**os.environ, "CLOSEDLOOP_HOME": str(closedloop_home), "COLUMNS": "200"}
    shown = subprocess.run(
        [sys.executable, "-m", "closedloop", "trace", "show", "run-cli"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert shown.returncode == 0, shown.stderr
    assert "final: CA933 on 3 May" in shown.stdout
    missing = subprocess.run(
        [sys.executable, "-m", "closedloop", "plot", "missing-run"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert missing.returncode == 2
    assert "RUN='missing-run'" in missing.stderr and "Traceback" not in missing.stderr
