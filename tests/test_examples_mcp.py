"""The MCP example and the MCP how-to run as a user runs them, as subprocesses."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.integration  # each starts Python and an MCP server subprocess


def run_python(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO / "bench" / "src")]),
    }
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True,
        timeout=300, check=False,
    )  # fmt: skip


def test_the_mcp_agent_example_runs_anywhere(tmp_path: Path) -> None:
    done = run_python([str(REPO / "examples" / "mcp_agent.py")], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert "tool forecast: recomputable" in lines  # the server's read-only hint
    assert "tool book_umbrella: once" in lines  # the example's declaration
    assert "forecast: ok [{'day': 'today', 'temp_c': 18.5, 'sky': 'cloudy'}]" in lines
    assert "forecast: empty []" in lines  # an unknown city is no match, not an error
    assert "book_umbrella: ok {'booked': 'Paris', 'pick_up': 'the station'}" in lines
    assert lines[-1] == "halt: final"


def python_blocks(page: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), re.DOTALL)


def test_the_python_blocks_of_the_mcp_how_to_run() -> None:
    blocks = python_blocks(REPO / "docs" / "how-to" / "mcp.md")
    assert blocks, "the page has a runnable example"
    for block in blocks:
        done = run_python(["-c", block], cwd=REPO)
        assert done.returncode == 0, f"{block}\n{done.stderr[-3000:]}"
