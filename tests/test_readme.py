"""Every ```python block in README.md runs, in order, in one namespace (docs cannot rot)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def _blocks() -> list[str]:
    return _BLOCK.findall(README.read_text(encoding="utf-8"))


def test_readme_has_python_examples() -> None:
    assert len(_blocks()) >= 3


def test_readme_examples_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CLOSEDLOOP_HOME", str(tmp_path / "home"))
    namespace: dict[str, object] = {"__name__": "__readme__"}
    for number, block in enumerate(_blocks(), start=1):
        code = compile(block, f"README.md:block{number}", "exec")
        exec(code, namespace)  # the block's own asserts are the checks
    assert os.getcwd() == str(tmp_path)
