"""A private module's ``__all__`` lists only what that module defines.

A name is listed once, where it is written; the packages and the public ``policy`` module
gather the names from there. A private module that lists a name it imports is a second
list to keep in step, and its importers reach the name through a detour.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "closedloop"


def _listed_but_imported(source: str) -> list[str]:
    """The names a module's literal ``__all__`` lists but binds only by an import."""
    tree = ast.parse(source)
    imported: set[str] = set()
    listed: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom | ast.Import):
            imported.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.List | ast.Tuple)
            and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)
        ):
            listed = [e.value for e in node.value.elts if isinstance(e, ast.Constant)]
    defined = {
        n.id
        for node in tree.body
        if not isinstance(node, ast.ImportFrom | ast.Import)
        for n in ast.walk(node)
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
    } | {
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    }
    return [name for name in listed if name in imported and name not in defined]


PRIVATE = sorted(
    p for p in SRC.rglob("_*.py") if p.name != "__init__.py" and "__pycache__" not in p.parts
)


def test_the_check_sees_a_re_export() -> None:
    source = 'from ._a import A, B\n\n__all__ = ["A", "C"]\n\nC = B\n'
    assert _listed_but_imported(source) == ["A"]
    assert _listed_but_imported('__all__ = ["f"]\n\ndef f() -> None: ...\n') == []


def test_there_are_private_modules_to_check() -> None:
    assert len(PRIVATE) > 100


@pytest.mark.parametrize("path", PRIVATE, ids=lambda p: str(p.relative_to(SRC)))
def test_a_private_module_lists_only_what_it_defines(path: Path) -> None:
    assert _listed_but_imported(path.read_text(encoding="utf-8")) == []
