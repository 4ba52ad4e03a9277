"""The README's two commands leave each other working, in either order, on a clean clone.

A clean clone of this tree runs the essential path of each command, the demo's shortest
form through the Makefile's own ``demo`` recipe and the documentation checks (every quoted
table against its results file), first one then the other, and the reverse. Either order
must pass, and ``git status`` must show nothing after each step: the main job writes only
its run folder, never a tracked file the documentation is judged against.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
VENV = Path(sys.prefix)
# The shortest demo: the deterministic test model, one task of each suite, no latency.
DEMO_ARGS = "--model test:oracle --tasks 1 --tool-tasks 1 --profile none --latency-scale 0"


def _git(cwd: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def _clean_clone(dest: Path) -> Path:
    """This tree's tracked files as they are now (uncommitted edits included), one commit."""
    listed = _git(REPO, "ls-files", "-z").split("\0")
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file():
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    _git(dest, "init", "-q")
    _git(dest, "add", "-A")
    _git(dest, "commit", "-q", "-m", "clone")
    return dest


def _env(clone: Path, home: Path) -> dict[str, str]:
    # Nothing of this pytest run (its options, its xdist worker) leaks into the clone's.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["CLOSEDLOOP_HOME"] = str(home)
    # The clone's own sources, ahead of the editable install of this tree.
    env["PYTHONPATH"] = os.pathsep.join([str(clone / "src"), str(clone / "bench" / "src")])
    return env


def _demo(clone: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    stamp = VENV / ".installed"
    # The environment is this one: neither reinstalled (-o the stamp) nor models pulled.
    command = [
        "make", "-o", str(stamp), "-o", "models", "demo",
        f"VENV={VENV}", f"DEMO_ARGS={DEMO_ARGS}",
    ]  # fmt: skip
    return subprocess.run(command, cwd=clone, env=env, capture_output=True, text=True)


def _doc_checks(clone: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    command = [
        sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
        "tests/test_doc_numbers.py",
    ]  # fmt: skip
    return subprocess.run(command, cwd=clone, env=env, capture_output=True, text=True)


@pytest.mark.parametrize("order", [("demo", "docs"), ("docs", "demo")])
def test_the_two_commands_pass_in_either_order_and_leave_the_tree_clean(
    order: tuple[str, str], tmp_path: Path
) -> None:
    if shutil.which("make") is None or shutil.which("git") is None:
        pytest.fail("make and git are needed (scripts/install_system_deps.sh installs them)")
    clone = _clean_clone(tmp_path / "clone")
    env = _env(clone, tmp_path / "home")
    steps = {"demo": _demo, "docs": _doc_checks}
    for name in order:
        done = steps[name](clone, env)
        assert done.returncode == 0, f"{name} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        assert _git(clone, "status", "--porcelain") == "", f"{name} left the tree dirty"
    runs = list((clone / "runs").iterdir())
    assert len(runs) == 1 and (runs[0] / "report.json").is_file()  # the demo's report is kept
