"""``closedloop bench adversarial`` from the command line: help, refused sizes, a tiny run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from closedloop_bench.cli import bench_app


def test_help_names_every_option() -> None:
    result = CliRunner().invoke(bench_app, ["adversarial", "--help"])
    assert result.exit_code == 0, result.output
    for option in ("--cases", "--episodes", "--tasks", "--seed", "--no-crash-tests", "--out"):
        assert option in result.output


@pytest.mark.parametrize(
    ("args", "named"),
    [(["--tasks", "0"], "--tasks"), (["--tasks", "2"], "--tasks"), (["--cases", "3"], "--cases")],
)
def test_a_size_it_cannot_run_is_refused_by_name(
    tmp_path: Path, args: list[str], named: str
) -> None:
    out = tmp_path / "adversarial.json"
    result = CliRunner().invoke(bench_app, ["adversarial", *args, "--out", str(out)])
    assert result.exit_code == 2 and named in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)  # no traceback
    assert not out.exists()


@pytest.mark.real_model  # the model-server fault calls a loopback server of its own
def test_the_fewest_store_tasks_meet_both_faults_and_the_report_records_its_command(
    tmp_path: Path,
) -> None:
    # Three tasks end before the Redis fault's scheduled restart: the row must still be
    # audited (the server is restarted for it), each fault must strike, and the report
    # be written.
    out = tmp_path / "adversarial.json"
    args = ["--cases", "4", "--episodes", "1", "--tasks", "3", "--seed", "3", "--no-crash-tests"]
    result = CliRunner().invoke(bench_app, ["adversarial", *args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    rows = {row["fault"]: row for row in report["faults"]}
    assert rows["redis_down"]["tasks"] == 3 and rows["disk_full_sqlite"]["tasks"] == 3
    assert rows["redis_down"]["typed_errors"] >= 1 and rows["disk_full_sqlite"]["typed_errors"] >= 1
    assert report["command"] == (
        f"closedloop bench adversarial {' '.join(args[:8])} --no-crash-tests --out {out}"
    )
    assert "redis_down" in result.output
