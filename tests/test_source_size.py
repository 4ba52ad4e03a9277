"""Sizes a reader can hold at once: no source file over 500 lines, no function over 80.

Read from the source with ``ast`` (nothing is imported); a function's length runs from
its ``def`` (decorators excluded) to its last line, docstring and comments included.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
MAX_FILE_LINES = 500
MAX_FUNCTION_LINES = 80


def _sources() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def long_files(paths: list[Path], root: Path = SRC, limit: int = MAX_FILE_LINES) -> list[str]:
    out = []
    for path in paths:
        lines = path.read_text(encoding="utf-8").count("\n")
        if lines > limit:
            out.append(f"{path.relative_to(root)}: {lines} lines")
    return out


def long_functions(source: str, name: str, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            assert node.end_lineno is not None
            length = node.end_lineno - node.lineno + 1
            if length > limit:
                out.append(f"{name}:{node.lineno} {node.name}: {length} lines")
    return out


def test_the_walk_sees_the_library() -> None:
    names = {p.relative_to(SRC).as_posix() for p in _sources()}
    assert "closedloop/agent/_driver.py" in names and len(names) > 200


def test_no_source_file_is_over_500_lines() -> None:
    assert long_files(_sources()) == []


def test_no_function_is_over_80_lines() -> None:
    found = [
        problem
        for path in _sources()
        for problem in long_functions(path.read_text(encoding="utf-8"), str(path.relative_to(SRC)))
    ]
    assert found == []


def test_the_checks_see_a_long_function_and_a_long_file(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(81))
    assert long_functions(f"def f():\n{body}\n", "m.py") == ["m.py:1 f: 82 lines"]
    assert long_functions("def g():\n    return 1\n", "m.py") == []
    big = tmp_path / "big.py"
    big.write_text("x = 1\n" * 501)
    assert long_files([big], root=tmp_path) == ["big.py: 501 lines"]
