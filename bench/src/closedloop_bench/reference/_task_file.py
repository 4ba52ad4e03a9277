"""A user's own world tasks: a JSONL file of ``ReferenceTask`` objects, validated line by line.

Each line is one task as ``ReferenceTask.model_dump_json()`` writes it (the generated
tasks are the templates: ``examples/faults_tasks.jsonl``): ``id``, ``split``,
``world_seed``, ``domain``, ``template``, ``prompt``, ``language``, ``today``,
``expected_steps``, ``required_fields`` (the JSON schema of the answer),
``ground_truth``, ``checker`` (a name in ``CHECKERS``), ``ideal_trajectory`` (the tool
calls an ideal agent makes, each a tool of the domain) and ``ideal_answer``; optional
``impossible`` and ``tags``.

:func:`load_world_tasks` raises :class:`~closedloop.harness.TaskFileError` naming the
file, the line and the field (the refinement and tool benchmarks' convention);
:func:`verify_world_tasks` then plays every task's ideal trajectory on a fault-free world
(the task's checker must accept it) and judges an empty run (no call, no answer; the
checker must refuse it), so a broken task is caught before any model is called.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from closedloop._exceptions import ConfigurationError
from closedloop.harness import TaskFileError

from ._checkers import CHECKERS, check
from ._tasks import Answer, ReferenceTask
from ._tools import DOMAIN_TOOLS, WorldTools
from ._trajectory import play_ideal

__all__ = ["describe_world_tasks", "load_world_tasks", "verify_world_tasks"]


def _field_of(exc: ValidationError) -> tuple[str, str]:
    err = exc.errors()[0]
    field = ".".join(str(p) if not isinstance(p, int) else f"[{p}]" for p in err["loc"])
    field = field.replace(".[", "[") or "(task)"
    message = str(err["msg"]).removeprefix("Value error, ")
    if err["type"] == "missing":
        message = "missing (required)"
    return field, message


def _task(data: object, source: str, line: int, world_seed: int) -> ReferenceTask:
    if not isinstance(data, Mapping):
        raise TaskFileError(source, line, "(task)", "each line must be a JSON object")
    try:
        task = ReferenceTask.model_validate(dict(data))
    except ValidationError as exc:
        field, reason = _field_of(exc)
        raise TaskFileError(source, line, field, reason) from None
    if task.world_seed != world_seed:
        raise TaskFileError(
            source,
            line,
            "world_seed",
            f"{task.world_seed} is not the benchmark's world seed ({world_seed})",
        )
    if task.checker not in CHECKERS:
        raise TaskFileError(
            source,
            line,
            "checker",
            f"unknown checker {task.checker!r} (known: {', '.join(CHECKERS)})",
        )
    allowed = DOMAIN_TOOLS[task.domain]
    for index, call in enumerate(task.ideal_trajectory):
        if call.tool not in allowed:
            raise TaskFileError(
                source,
                line,
                f"ideal_trajectory[{index}].tool",
                f"{call.tool!r} is not a {task.domain} tool ({', '.join(allowed)})",
            )
    return task


def _read(path: str | os.PathLike[str], world_seed: int) -> list[tuple[ReferenceTask, int]]:
    file = Path(path)
    if not file.is_file():
        raise ConfigurationError("path", str(path), "is not a task file")
    source = str(file)
    out: list[tuple[ReferenceTask, int]] = []
    seen: dict[str, int] = {}
    with file.open(encoding="utf-8") as handle:
        for number, text in enumerate(handle, start=1):
            if not text.strip():
                continue
            try:
                data = json.loads(text)
            except json.JSONDecodeError as exc:
                raise TaskFileError(source, number, "(json)", f"not JSON: {exc.msg}") from None
            task = _task(data, source, number, world_seed)
            if task.id in seen:
                raise TaskFileError(
                    source, number, "id", f"{task.id!r} repeats line {seen[task.id]}"
                )
            seen[task.id] = number
            out.append((task, number))
    if not out:
        raise ConfigurationError("path", str(path), "holds no tasks")
    return out


def load_world_tasks(
    path: str | os.PathLike[str], *, world_seed: int = 0
) -> tuple[ReferenceTask, ...]:
    """Every task of a JSONL file (blank lines skipped); ids must be unique and every task
    must be for the world of ``world_seed``."""
    return tuple(task for task, _ in _read(path, world_seed))


async def verify_world_tasks(path: str | os.PathLike[str], *, world_seed: int = 0) -> None:
    """Load ``path``, then on a fault-free world of ``world_seed``: every ideal trajectory
    must satisfy its task's checker, and an empty run (no call, no answer) must not."""
    from ..world import serve_world_async  # a server: only when a file is verified

    entries = _read(path, world_seed)
    source = str(Path(path))
    async with (
        serve_world_async("none", seed=world_seed, latency_scale=0.0) as world,
        WorldTools(world.base_url) as tools,
    ):
        for task, line in entries:
            problem = await _judged(task, world, tools)
            if problem is not None:
                field, reason = problem
                raise TaskFileError(source, line, field, f"task {task.id}: {reason}")


async def _judged(task: ReferenceTask, world: Any, tools: WorldTools) -> tuple[str, str] | None:
    """(field, reason) when the ideal run fails its checker or an empty run passes it."""
    world.reset()
    tools.clear_journal()
    try:
        answer, _ = await play_ideal(task, tools)
    except Exception as exc:  # any refusal of the world is the task's fault
        return "ideal_trajectory", f"the world refused it: {type(exc).__name__}: {exc}"
    verdict = check(task, answer, world)
    if not verdict.success:
        return "ideal_answer", f"checker {task.checker} refuses the ideal run: {verdict.reason}"
    world.reset()
    empty = check(task, Answer(), world)
    if empty.success:
        return (
            "checker",
            f"checker {task.checker} accepts an empty run (no call, no answer): {empty.reason}",
        )
    return None


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= 100 else text[:97] + "..."


def describe_world_tasks(tasks: Sequence[ReferenceTask]) -> str:
    """Each task for a person: id, domain, steps, checker, prompt, ideal calls and answer."""
    out: list[str] = []
    for task in tasks:
        kind = ", impossible" if task.impossible else ""
        out.append(
            f"{task.id}: {task.domain}, {task.expected_steps} step(s), checker {task.checker}{kind}"
        )
        out.append(f"  prompt: {task.prompt}")
        for call in task.ideal_trajectory:
            out.append(f"  call: {call.tool}({_short(call.arguments)})")
        out.append(f"  answer: {_short(task.ideal_answer.fields)}")
    return "\n".join(out) + "\n"
