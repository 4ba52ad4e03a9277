"""Every ```python block in README.md and docs/**/*.md runs (docs cannot rot).

A block runs alone, in a fresh namespace, as a reader who pastes only that block would
run it; a block that builds on the one before says so with ``<!-- continues -->`` on the
line above its fence (blank lines between are allowed), and runs after its predecessors
in their namespace. A block under ``<!-- file: NAME -->`` is a file the page asks the reader
to save (an MCP server, say): it is written to NAME in the page's directory, not run. Each page runs in a fresh directory with its own ``CLOSEDLOOP_HOME``
and a copy of ``examples/`` (pages say "run it from the repository root" and name those
files); a block's own asserts are the checks.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
CONTINUES = "<!-- continues -->"
_BLOCK = re.compile(
    r"(?:^<!-- (continues|file: [\w./-]+) -->\n(?:[ \t]*\n)*)?^```python\n(.*?)^```", re.S | re.M
)


def _pages() -> list[Path]:
    return [README, *sorted((REPO / "docs").rglob("*.md"))]


def _groups_of(text: str) -> list[list[str]]:
    """The page's blocks, grouped: each unmarked block opens a group, a marked one joins."""
    groups: list[list[str]] = []
    for marker, block in _BLOCK.findall(text):
        if marker.startswith("file: "):
            continue  # a file the page asks the reader to save: written, not run here
        if marker and groups:
            groups[-1].append(block)
        else:
            groups.append([block])
    return groups


def _files_of(text: str) -> dict[str, str]:
    """The blocks marked ``<!-- file: NAME -->``: what the page asks the reader to save."""
    return {m.removeprefix("file: "): b for m, b in _BLOCK.findall(text) if m.startswith("file: ")}


def _groups(page: Path) -> list[list[str]]:
    return _groups_of(page.read_text(encoding="utf-8"))


def _blocks(page: Path) -> list[str]:
    return [block for group in _groups(page) for block in group]


def _name(page: Path) -> str:
    return page.relative_to(REPO).as_posix()


def _run_groups(groups: list[list[str]], name: str) -> None:
    number = 0
    for group in groups:
        namespace: dict[str, object] = {"__name__": "__readme__"}  # a reader's fresh session
        for block in group:
            number += 1
            exec(compile(block, f"{name}:block{number}", "exec"), namespace)


def test_readme_has_python_examples() -> None:
    assert len(_blocks(README)) >= 1
    pages_with_examples = [p for p in _pages() if _blocks(p)]
    assert len(pages_with_examples) >= 10  # the tour moved into the documentation site
    assert sum(len(_blocks(p)) for p in _pages()) >= 20


def test_an_unmarked_block_that_needs_an_earlier_one_fails() -> None:
    first = "```python\nx = 1\n```\n\nThen:\n\n"
    second = "```python\nassert x == 1\n```\n"
    with pytest.raises(NameError, match="'x'"):
        _run_groups(_groups_of(first + second), "page.md")
    saved = "<!-- file: srv.py -->\n```python\nprint('served')\n```\n"
    assert _groups_of(saved + first) == [["x = 1\n"]]
    assert _files_of(saved + first) == {"srv.py": "print('served')\n"}
    marked = first + CONTINUES + "\n\n" + second
    assert _groups_of(marked) == [["x = 1\n", "assert x == 1\n"]]
    _run_groups(_groups_of(marked), "page.md")  # marked, it runs after its predecessor


def test_a_marker_elsewhere_marks_nothing() -> None:
    text = f"{CONTINUES}\n\nSome prose.\n\n```python\ny = 2\n```\n"
    assert _groups_of(text) == [["y = 2\n"]]
    for page in _pages():  # every marker on a page sits right above a python block
        assert "<!-- continues" not in _BLOCK.sub("", page.read_text(encoding="utf-8")), page


@pytest.mark.parametrize("page", [p for p in _pages() if _blocks(p)], ids=_name)
def test_readme_examples_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CLOSEDLOOP_HOME", str(tmp_path / "home"))
    for name, code in _files_of(page.read_text(encoding="utf-8")).items():
        Path(name).write_text(code, encoding="utf-8")  # saved as the page says, then used
    _run_groups(_groups(page), _name(page))  # the blocks' own asserts are the checks
    assert os.getcwd() == str(tmp_path)
