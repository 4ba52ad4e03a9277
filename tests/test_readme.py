"""Every ```python block in README.md and docs/**/*.md runs (docs cannot rot).

Each page's blocks run in order, in one namespace per page, in a fresh directory with
its own ``CLOSEDLOOP_HOME`` and a copy of ``examples/`` (pages say "run it from the
repository root" and name those files); a block's own asserts are the checks.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def _pages() -> list[Path]:
    return [README, *sorted((REPO / "docs").rglob("*.md"))]


def _blocks(page: Path) -> list[str]:
    return _BLOCK.findall(page.read_text(encoding="utf-8"))


def _name(page: Path) -> str:
    return page.relative_to(REPO).as_posix()


def test_readme_has_python_examples() -> None:
    assert len(_blocks(README)) >= 1
    pages_with_examples = [p for p in _pages() if _blocks(p)]
    assert len(pages_with_examples) >= 10  # the tour moved into the documentation site
    assert sum(len(_blocks(p)) for p in _pages()) >= 20


@pytest.mark.parametrize("page", [p for p in _pages() if _blocks(p)], ids=_name)
def test_readme_examples_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CLOSEDLOOP_HOME", str(tmp_path / "home"))
    namespace: dict[str, object] = {"__name__": "__readme__"}
    for number, block in enumerate(_blocks(page), start=1):
        code = compile(block, f"{_name(page)}:block{number}", "exec")
        exec(code, namespace)  # the block's own asserts are the checks
    assert os.getcwd() == str(tmp_path)
