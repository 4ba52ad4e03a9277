"""``closedloop bench tools`` in process, with test models: the same options as
bench/tools.py, and bad input refused in one line before any model call."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from closedloop.cli import main
from closedloop_bench.cli._bench import app

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples" / "tools_tasks.jsonl"


def test_bench_tools_runs_the_strategies_and_writes_the_report(tmp_path: Path) -> None:
    out = tmp_path / "tools.json"
    strategies = "open_loop,strict,reask@1,votes@2,strong,closedloop,frozen"
    args = ["tools", "--split", "dev", "--limit", "5", "--models", "test:no-call,test:oracle"]
    args += ["--strategies", strategies, "--out", str(out), "--no-progress"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    rows = {(c["strategy"], c["model"]) for c in data["cells"] if c["family"] == "all"}
    assert ("strong", "test:oracle") in rows and ("strong", "test:no-call") not in rows
    assert ("closedloop", "test:oracle") in rows and ("frozen", "test:no-call") in rows
    assert len(data["results"]) == 5 * (6 * 2 + 1)
    assert out.with_suffix(".png").exists() and "report:" in result.output


def test_bench_tools_takes_a_users_task_file(tmp_path: Path) -> None:
    out = tmp_path / "mine.json"
    args = ["tools", "--tasks", str(EXAMPLES), "--strategies", "closedloop", "--out", str(out)]
    result = CliRunner().invoke(app, [*args, "--no-progress", "--no-plot"])
    assert result.exit_code == 0, result.output
    cells = json.loads(out.read_text())["cells"]
    assert any(c["family"] == "all" and c["n"] == 10 for c in cells)


def _bad_task_file(tmp_path: Path, change: str) -> Path:
    line = json.loads(EXAMPLES.read_text().splitlines()[0])
    if change == "missing":
        del line["domain"]
    else:
        line["expected"]["calls"][0]["name"] = "launch_rocket"
    path = tmp_path / f"{change}.jsonl"
    path.write_text(EXAMPLES.read_text().splitlines()[1] + "\n" + json.dumps(line) + "\n")
    return path


@pytest.mark.parametrize(
    ("change", "words"),
    [("missing", "line 2, field domain: missing"), ("unknown", "unknown function 'launch_rocket'")],
)
def test_a_bad_task_file_is_one_line_naming_the_line_and_field(
    change: str, words: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _bad_task_file(tmp_path, change)
    assert main(["bench", "tools", "--tasks", str(path), "--models", "local:nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and "line 2" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--strategies", "votes@0"], "the vote count k must be at least 1"),
        (["--models", "test:nope"], "test models"),
        (["--limit", "0"], "--limit"),
        (["--split", "train"], "--split"),
    ],
)
def test_bad_options_are_one_line(
    args: list[str], words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", "tools", *args, "--no-progress", "--no-plot"]) == 2
    err = capsys.readouterr().err
    assert words in err and len(err.strip().splitlines()) == 1


def test_explain_lists_the_tasks_without_a_model(capsys: pytest.CaptureFixture[str]) -> None:
    # A model spec that cannot load: --explain must not get that far.
    args = ["bench", "tools", "--tasks", str(EXAMPLES), "--models", "local:nope", "--explain"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "example-single-001: single, units, tools compute_percentage" in out
    assert "  expected: compute_percentage(part=18 ± 0.005, whole=30 ± 0.005)" in out
    assert "  expected: no call" in out and "  order: sequence" in out
    assert out.strip().endswith(f"10 task(s) from {EXAMPLES}")


def test_a_bad_tool_task_file_is_the_harness_task_file_error(tmp_path: Path) -> None:
    from closedloop.harness import TaskFileError
    from closedloop_bench.tools import load_tool_tasks

    with pytest.raises(TaskFileError) as caught:
        load_tool_tasks(_bad_task_file(tmp_path, "missing"))
    assert (caught.value.line, caught.value.field) == (2, "domain")
