"""The MCP example and the MCP how-to run as a user runs them, as subprocesses."""

from __future__ import annotations

import os
import re
import shutil
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


_BLOCK = re.compile(
    r"(?:^<!-- file: ([\w./-]+) -->\n(?:[ \t]*\n)*)?^```python\n(.*?)^```", re.S | re.M
)


def python_blocks(page: Path) -> tuple[dict[str, str], list[str]]:
    """The files the page asks the reader to save (``<!-- file: NAME -->``), and the rest."""
    found = _BLOCK.findall(page.read_text(encoding="utf-8"))
    return {name: block for name, block in found if name}, [b for name, b in found if not name]


def test_the_python_blocks_of_the_mcp_how_to_run(tmp_path: Path) -> None:
    # As a reader runs them: the server file saved, each block a fresh ``python -c`` in a
    # directory with the examples beside it; the server the page writes is started for real.
    files, blocks = python_blocks(REPO / "docs" / "how-to" / "mcp.md")
    assert blocks, "the page has a runnable example"
    assert "library_server.py" in files, "the page shows a server of its own"
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    for name, code in files.items():
        (tmp_path / name).write_text(code, encoding="utf-8")
    for block in blocks:
        done = run_python(["-c", block], cwd=tmp_path)
        assert done.returncode == 0, f"{block}\n{done.stderr[-3000:]}"
    assert any("library_server.py" in block for block in blocks)
