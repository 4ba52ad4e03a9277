"""Every script in examples/ runs, as a user would run it, and prints what it promises.

Each ``examples/*.py`` is run as its own process (``python examples/NAME.py``) from an
empty directory with its own ``$CLOSEDLOOP_HOME``. The examples use deterministic
models, so their key lines are known exactly; ``KEY_LINES`` lists them per script. A new
script is picked up by the glob and must at least run cleanly and print something; give
it key lines here too.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration  # one subprocess per example

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
TIMEOUT_S = 180  # a few seconds each when the machine is idle; bounded when it is not

KEY_LINES: dict[str, tuple[str, ...]] = {
    "first_agent.py": (
        "step 0: called get_weather({'city': 'Paris'})",
        "step 1: answered",
        "halt: final",
        "success: True",
        "output: Paris: 23 °C and clear",
        "model calls: 2",
    ),
    "model_ladder.py": (
        "step 0: rung 0 (small) refused",
        "step 1: rung 1 (strong) convert",
        "step 2: rung 0 (small) refused",
        "step 3: rung 1 (strong) answer",
        "halt: final",
        "output: 100 EUR is 108.0 USD",
    ),
    "service_agent.py": (
        "step 0: add",
        "step 1: answer",
        "end: done",
        "halt: final",
        "answer: 42",
    ),
    "mcp_agent.py": (
        "tool forecast: recomputable",
        "tool book_umbrella: once",
        "forecast: empty []",
        "halt: final",
    ),
    "refine_own_tasks.py": (
        "mine/clamp: 3 checks, scores 0.67, 1.00",
        "  round 2 was told (light): A3: clamp(11, 0, 10) returned 11, expected 10",
        "mine/last_word: 3 checks, scores 0.67, 1.00",
        "  best score 1.00 in round 2",
        "  stopped: target_met",
    ),
}


SERVERS = {"mcp_weather_server.py": "the MCP server mcp_agent.py starts; it waits on stdin"}
"""Scripts in examples/ that other examples start, not run on their own: name -> why."""


def _examples() -> list[Path]:
    return sorted(p for p in EXAMPLES.glob("*.py") if p.name not in SERVERS)


def test_every_server_script_is_started_by_an_example() -> None:
    for name in SERVERS:
        assert (EXAMPLES / name).is_file(), name
        assert any(name in p.read_text(encoding="utf-8") for p in _examples()), name


def test_the_examples_are_found() -> None:
    names = {p.name for p in _examples()}
    assert set(KEY_LINES) <= names, sorted(set(KEY_LINES) - names)


@pytest.mark.parametrize("script", _examples(), ids=lambda p: p.name)
def test_the_example_runs_and_prints_its_key_lines(script: Path, tmp_path: Path) -> None:
    env = dict(os.environ)
    env["CLOSEDLOOP_HOME"] = str(tmp_path / "home")
    # The checkout's sources first, as `pip install -e .` would give a user.
    paths = [str(REPO / "src"), str(REPO / "bench" / "src"), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    try:
        done = subprocess.run(
            [sys.executable, str(script)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{script.name} ran past {TIMEOUT_S} s; its output so far: {exc.stdout!r}")
    assert done.returncode == 0, f"{script.name} failed:\n{done.stderr[-3000:]}"
    lines = done.stdout.splitlines()
    assert lines, f"{script.name} printed nothing"
    missing = [line for line in KEY_LINES.get(script.name, ()) if line not in lines]
    assert not missing, f"{script.name} did not print {missing}; it printed:\n{done.stdout}"
