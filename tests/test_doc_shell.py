"""Every shell block in README.md and docs/**/*.md runs, or says plainly that it is not run.

A ```console block is a session: ``$ `` lines are commands (a trailing ``\\`` continues one),
the other lines are what they print. The test runs the commands in order under
``bash -euo pipefail`` in a fresh directory with its own ``CLOSEDLOOP_HOME``; a command
ending in ``&`` runs in the background (the service) and is stopped by the block's own
``kill %1``, and whatever is left of the block's process group when it ends is stopped
too. Every printed line the block shows must be printed; a shown line with ``…`` stands
for the parts around it. Port 8808 becomes a free port, so runs in parallel do not meet.

A block that cannot run here (it takes minutes, or needs a server the suite does not
start) is fenced as ```text and opens with a ``# not run`` line a reader sees. Any other
shell fence (```bash, ```sh ...) fails: it would look tested without being run.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```([\w-]*)\n(.*?)^```", re.S | re.M)
SHELL_FENCES = {"bash", "sh", "shell", "zsh", "console", "shell-session"}
COMMAND_WORDS = {
    "closedloop", "make", "python", "python3", "curl", "pip", "ray", "redis-server",
    "export", "cd", "uvicorn", "docker", "ollama", "vllm", ".venv/bin/python", "bash",
}  # fmt: skip
NOT_RUN = "# not run"
DOC_PORT = "8808"
TOOLS = ("bash", "curl", "jq")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    fence: str
    text: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO).as_posix()}:{self.line}"


def _pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def blocks() -> list[Block]:
    found = []
    for page in _pages():
        text = page.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append(Block(page, line, match.group(1), match.group(2)))
    return found


def looks_like_commands(text: str) -> bool:
    """A block a reader would paste into a shell."""
    for line in text.splitlines():
        words = line.strip().split()
        if words and (words[0] == "$" or words[0] in COMMAND_WORDS):
            return True
    return False


def session(text: str) -> tuple[list[str], list[str]]:
    """The commands of a console block and the lines it shows them printing."""
    commands: list[str] = []
    shown: list[str] = []
    continuing = False
    for raw in text.splitlines():
        if continuing:
            commands[-1] += "\n" + raw
        elif raw.startswith("$ "):
            commands.append(raw[2:])
        elif raw.strip():
            shown.append(raw.strip())
        continuing = (continuing or raw.startswith("$ ")) and raw.rstrip().endswith("\\")
    return commands, shown


def printed(shown_line: str, output: str) -> bool:
    lines = [line.strip() for line in output.splitlines()]
    if "…" not in shown_line:
        return shown_line in lines
    parts = [p for p in shown_line.split("…") if p.strip()]
    return all(any(p.strip() in line for line in lines) for p in parts)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _shim(folder: Path) -> Path:
    """``closedloop`` on PATH, running this checkout (not another installed copy)."""
    folder.mkdir()
    script = folder / "closedloop"
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m closedloop "$@"\n', encoding="utf-8")
    script.chmod(0o755)
    return folder


def _console_blocks() -> list[Block]:
    return [b for b in blocks() if b.fence == "console"]


def test_the_session_parser_reads_commands_continuations_and_output() -> None:
    commands, shown = session('$ echo a \\\n    b\na b\n$ printf "x\\n"\nx\n')
    assert commands == ["echo a \\\n    b", 'printf "x\\n"']
    assert shown == ["a b", "x"]
    assert printed('data: {"status":"done",…}', 'event: end\ndata: {"status":"done","x":1}')
    assert not printed("ok", "not ok")
    assert looks_like_commands("# not run\nclosedloop serve") and not looks_like_commands("a | b")


@pytest.mark.parametrize("block", blocks(), ids=lambda b: b.where)
def test_every_shell_block_is_run_or_marked_not_run(block: Block) -> None:
    if block.fence in SHELL_FENCES:
        assert block.fence == "console", (
            f"{block.where}: a ```{block.fence} block is neither run nor marked; fence it as "
            "```console ($ commands, run by this test) or as ```text opening with '# not run'"
        )
        commands, _ = session(block.text)
        assert commands, f"{block.where}: a console block needs '$ ' command lines"
    elif block.fence in ("text", "") and looks_like_commands(block.text):
        first = block.text.lstrip().splitlines()[0]
        assert first.startswith(NOT_RUN), (
            f"{block.where}: these commands are not run by the tests; "
            f"open the block with a '{NOT_RUN}: <why>' line"
        )


def test_the_readme_and_the_service_guide_hold_a_complete_session() -> None:
    where = {b.where.split(":")[0] for b in _console_blocks()}
    assert {"README.md", "docs/how-to/service.md"} <= where
    readme = next(b for b in _console_blocks() if b.page.name == "README.md")
    for step in ("keys create", "serve", "/v1/sessions", "/runs", "/events"):
        assert step in readme.text, f"the README's session lacks {step!r}"


@pytest.mark.integration
@pytest.mark.timeout(400)
@pytest.mark.parametrize("block", _console_blocks(), ids=lambda b: b.where)
def test_console_blocks_run(block: Block, tmp_path: Path) -> None:
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    assert not missing, (
        f"{block.where} needs {', '.join(missing)}: run scripts/install_system_deps.sh"
    )
    commands, shown = session(block.text)
    port = str(_free_port())
    script = "\n".join(c.replace(DOC_PORT, port) for c in commands)
    work = tmp_path / "work"
    work.mkdir()
    env = {
        **os.environ,
        "PATH": f"{_shim(tmp_path / 'bin')}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO / "bench" / "src")]),
        "CLOSEDLOOP_HOME": str(tmp_path / "home"),
        "PYTHONUNBUFFERED": "1",
    }
    process = subprocess.Popen(
        ["bash", "-euo", "pipefail", "-c", script + "\nwait\n"],
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # one process group: the block's background jobs too
    )
    try:
        out, err = process.communicate(timeout=300)
    finally:
        with contextlib.suppress(ProcessLookupError):  # the group is gone: nothing was left
            os.killpg(process.pid, signal.SIGTERM)  # whatever the block left running
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, f"{block.where} failed:\n{out[-3000:]}\n{err[-3000:]}"
    absent = [line for line in shown if not printed(line, out)]
    assert absent == [], f"{block.where}: not printed: {absent}\n--- printed:\n{out[-3000:]}"


# The Debian package each tool the tests call comes in.
PACKAGE_OF = {
    "redis-server": "redis-server",
    "node": "nodejs",
    "chromium": "chromium",
    "chromedriver": "chromium-driver",
    "curl": "curl",
    "jq": "jq",
    "bash": "bash",
    "git": "git",
    "make": "make",
}


def test_the_system_deps_script_installs_every_tool_the_tests_use() -> None:
    script = (REPO / "scripts" / "install_system_deps.sh").read_text(encoding="utf-8")
    listed = re.search(r"^packages=\(([^)]*)\)", script, re.M)
    assert listed, "scripts/install_system_deps.sh lists no packages"
    packages = set(listed.group(1).split()) | {"bash"}  # bash runs the script itself
    named: set[str] = set(TOOLS)
    for path in (REPO / "tests").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        named |= set(re.findall(r"shutil\.which\(\"([\w.-]+)\"\)", text))
        named |= set(re.findall(r"\"/usr/bin/([\w.-]+)\"", text))
    unknown = sorted(t for t in named if t not in PACKAGE_OF)
    assert unknown == [], f"tools the tests call with no package here: {unknown}"
    missing = sorted({PACKAGE_OF[t] for t in named} - packages)
    assert missing == [], f"scripts/install_system_deps.sh does not install {missing}"
