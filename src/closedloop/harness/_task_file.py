"""A user's own refinement tasks: a JSONL file in HumanEval's form, validated line by line.

Each line is one JSON object::

    {"task_id": "lru/1", "entry_point": "LRUCache",
     "prompt": "Write a class LRUCache(capacity) with get(key) and put(key, value) ...",
     "test": "def check(candidate):\\n    c = candidate(2)\\n    c.put(1, 1)\\n    ...",
     "reference": "class LRUCache: ..."}

``task_id``, ``prompt``, ``entry_point`` and ``test`` are required strings;
``canonical_solution`` (HumanEval's: the body that completes the prompt) or
``reference`` (a whole module) is optional, one or the other. ``test`` defines
``check(candidate)``; it is split into checks by :func:`split_check`. A prompt that is
Python (a signature and a docstring, as in HumanEval) is shown to the model as code to
complete and its other definitions are run before the model's code; a prose prompt is
shown as it is.

:func:`load_task_file` raises :class:`TaskFileError` naming the file, the line and the
field; :func:`verify_references` then runs, in the sandbox, each reference against its
checks (all must pass) and an empty candidate (every body ``pass``; at least one check
must fail), so a broken task is caught before any model is called.
"""

from __future__ import annotations

import ast
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .._exceptions import ConfigurationError
from ._humaneval import HumanEvalProblem, is_python
from ._sandbox import Sandbox
from ._tasks import CodeTask

__all__ = [
    "TaskFileError",
    "describe_tasks",
    "empty_candidate",
    "load_task_file",
    "load_verified_tasks",
    "verify_references",
]

_REQUIRED = ("task_id", "prompt", "entry_point", "test")
_OPTIONAL = ("canonical_solution", "reference")


class TaskFileError(ConfigurationError):
    """A task file line that is not a valid task: names the file, the line and the field."""

    def __init__(self, source: str, line: int, field: str, reason: str) -> None:
        self.source = source
        self.line = line
        self.field = field
        super().__init__(f"{source} line {line}, field {field}", None, reason)
        # ConfigurationError's "argument=value" form reads badly for a file position.
        self.args = (f"{source} line {line}, field {field}: {reason}",)

    def __str__(self) -> str:
        return str(self.args[0])


@dataclass(frozen=True, slots=True)
class _Line:
    problem: HumanEvalProblem
    line: int


def _defines(source: str, name: str) -> bool:
    try:
        module = ast.parse(source)
    except SyntaxError:
        return False
    for stmt in module.body:
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            if stmt.name == name:
                return True
        elif isinstance(stmt, ast.Assign | ast.AnnAssign):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return True
        elif isinstance(stmt, ast.Import | ast.ImportFrom) and any(
            (a.asname or a.name.split(".")[0]) == name for a in stmt.names
        ):
            return True
    return False


def _problem(data: object, source: str, line: int) -> HumanEvalProblem:
    def fail(field: str, reason: str) -> TaskFileError:
        return TaskFileError(source, line, field, reason)

    if not isinstance(data, Mapping):
        raise fail("(task)", "each line must be a JSON object")
    for field in _REQUIRED:
        if field not in data:
            raise fail(field, "missing (required)")
    unknown = sorted(set(data) - set(_REQUIRED) - set(_OPTIONAL))
    if unknown:
        raise fail(unknown[0], f"unknown field (known: {', '.join(_REQUIRED + _OPTIONAL)})")
    for field in (*_REQUIRED, *_OPTIONAL):
        if field in data and not isinstance(data[field], str):
            raise fail(field, f"must be a string, not {type(data[field]).__name__}")
    for field in ("task_id", "prompt", "test"):
        if not data[field].strip():
            raise fail(field, "must not be empty")
    entry = data["entry_point"]
    if not entry.isidentifier():
        raise fail("entry_point", f"{entry!r} is not a Python name")
    if "canonical_solution" in data and "reference" in data:
        raise fail("reference", "give canonical_solution or reference, not both")
    problem = HumanEvalProblem(
        task_id=data["task_id"],
        prompt=data["prompt"],
        canonical_solution=data.get("canonical_solution", ""),
        test=data["test"],
        entry_point=entry,
        reference=data.get("reference"),
    )
    if problem.has_reference:
        field = "reference" if "reference" in data else "canonical_solution"
        program = problem.canonical_program
        try:
            ast.parse(program)
        except SyntaxError as exc:
            where = "" if problem.reference is not None else "the prompt followed by "
            raise fail(
                field, f"{where}it is not valid Python (line {exc.lineno}: {exc.msg})"
            ) from None
        if not _defines(program, entry):
            raise fail("entry_point", f"{entry!r} is not defined by the prompt and the {field}")
    elif is_python(problem.prompt) and not _defines(problem.prompt, entry):
        raise fail("entry_point", f"{entry!r} is not defined by the prompt")
    try:
        problem.task()
    except ConfigurationError as exc:
        raise fail("test", exc.reason) from None
    return problem


def _read(path: str | os.PathLike[str]) -> list[_Line]:
    file = Path(path)
    if not file.is_file():
        raise ConfigurationError("path", str(path), "is not a task file")
    source = str(file)
    out: list[_Line] = []
    seen: dict[str, int] = {}
    with file.open(encoding="utf-8") as handle:
        for number, text in enumerate(handle, start=1):
            if not text.strip():
                continue
            try:
                data = json.loads(text)
            except json.JSONDecodeError as exc:
                raise TaskFileError(source, number, "(json)", f"not JSON: {exc.msg}") from None
            problem = _problem(data, source, number)
            if problem.task_id in seen:
                raise TaskFileError(
                    source,
                    number,
                    "task_id",
                    f"{problem.task_id!r} repeats line {seen[problem.task_id]}",
                )
            seen[problem.task_id] = number
            out.append(_Line(problem, number))
    if not out:
        raise ConfigurationError("path", str(path), "holds no tasks")
    return out


def load_task_file(path: str | os.PathLike[str]) -> tuple[HumanEvalProblem, ...]:
    """Every task of a JSONL file in HumanEval's form (blank lines skipped); see the module."""
    return tuple(entry.problem for entry in _read(path))


def _emptied(source: str, entry: str) -> str | None:
    """``source`` with the entry point's body (every method's, for a class) set to ``pass``."""
    try:
        module = ast.parse(source)
    except SyntaxError:
        return None
    for stmt in module.body:
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef) and stmt.name == entry:
            stmt.body = [ast.Pass()]
            return ast.unparse(ast.fix_missing_locations(module))
        if isinstance(stmt, ast.ClassDef) and stmt.name == entry:
            for item in stmt.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    item.body = [ast.Pass()]
            return ast.unparse(ast.fix_missing_locations(module))
    return None


def empty_candidate(problem: HumanEvalProblem) -> str:
    """Code that defines the entry point and does nothing: every body is ``pass``."""
    for source in (problem.canonical_program if problem.has_reference else "", problem.prompt):
        if source:
            emptied = _emptied(source, problem.entry_point)
            if emptied is not None:
                return emptied
    return f"def {problem.entry_point}(*args, **kwargs):\n    return None\n"


async def verify_references(
    problems: Sequence[HumanEvalProblem],
    sandbox: Sandbox | None = None,
    *,
    source: str = "<tasks>",
    lines: Sequence[int] | None = None,
) -> None:
    """Raise :class:`TaskFileError` unless every reference passes all its task's checks and
    an empty candidate fails at least one. ``lines`` gives each problem's line in ``source``."""
    box = Sandbox() if sandbox is None else sandbox
    numbers = list(lines) if lines is not None else list(range(1, len(problems) + 1))
    for problem, number in zip(problems, numbers, strict=True):
        task = problem.task()
        if problem.has_reference:
            field = "reference" if problem.reference is not None else "canonical_solution"
            evaluation = await box.run(task, problem.canonical_program)
            if evaluation.failures:
                failure = evaluation.failures[0]
                check = task.check(failure.name)
                raise TaskFileError(
                    source,
                    number,
                    field,
                    f"task {problem.task_id}: the reference fails check {failure.name} "
                    f"({_one_line(check.test)}): {failure.describe()}",
                )
        empty = await box.run(task, empty_candidate(problem))
        if not empty.failures:
            raise TaskFileError(
                source,
                number,
                "test",
                f"task {problem.task_id}: an empty {problem.entry_point} (every body `pass`) "
                f"passes all {empty.total} checks; they test nothing",
            )


async def load_verified_tasks(
    path: str | os.PathLike[str], sandbox: Sandbox | None = None, *, limit: int | None = None
) -> tuple[HumanEvalProblem, ...]:
    """:func:`load_task_file` (the whole file), then :func:`verify_references` on the first
    ``limit`` tasks (all by default): the ones a run is about to use."""
    entries = _read(path)
    if limit is not None:
        entries = entries[:limit]
    problems = [e.problem for e in entries]
    await verify_references(
        problems, sandbox, source=str(Path(path)), lines=[e.line for e in entries]
    )
    return tuple(problems)


def _one_line(source: str) -> str:
    lines = [ln.strip() for ln in source.strip().splitlines() if ln.strip()]
    text = "; ".join(lines)
    return text if len(text) <= 120 else text[:117] + "..."


def describe_tasks(tasks: Sequence[CodeTask]) -> str:
    """The split, for a person: each task, then each check's setup and test."""
    out: list[str] = []
    for task in tasks:
        out.append(f"{task.name}: {len(task.checks)} check(s), entry point {task.entry_point}")
        for check in task.checks:
            out.append(f"  {check.name}:")
            for label, text in (("setup", check.setup), ("test", check.test)):
                body = text.strip().splitlines()
                for index, line in enumerate(body):
                    out.append(f"    {label if index == 0 else ' ' * len(label)} | {line}")
    return "\n".join(out) + "\n"
