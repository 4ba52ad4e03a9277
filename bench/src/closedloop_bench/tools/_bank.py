"""A sample bank: k recorded samples of the constrained single call for every task.

Each task's prompt is read once and sampled k times (the first greedily, the rest at a
temperature, each with its token logprobs), and every sample is kept with what the checker
made of it and what it cost. Any strategy whose decisions depend only on those samples
(the single call, fixed votes, adaptive stopping, a cascade between two banks, a threshold
set online) is then replayed exactly, so a whole split is judged without re-running a
model; a live run of the real strategies on a subset confirms the replay.

The file is gzip, one JSON object per line: a header, then one line per task. Each line is
its own gzip member, appended and flushed as soon as the task is read, so a recording that
stops keeps every finished task and resumes after the last one.
"""

from __future__ import annotations

import gzip
import json
import time
import zlib
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from closedloop.models import Model, ModelRequest

from ._calibration import _key, _reply
from ._format import ToolTask
from ._prompt import build_messages, strict_schema
from ._score import score

__all__ = ["BankMismatchError", "read_bank", "record_bank", "record_task"]


class BankMismatchError(ValueError):
    """A bank file was recorded with other settings than the ones asked to resume it."""


def read_bank(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The header and the task lines of a bank; a truncated last line (a recording killed
    mid-write) is dropped, and a missing file reads as no header and no tasks."""
    header: dict[str, Any] = {}
    tasks: list[dict[str, Any]] = []
    if not path.exists():
        return header, tasks
    for line in _lines(path):
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            break
        if row.get("kind") == "header":
            header = row
        elif row.get("kind") == "task":
            tasks.append(row)
    return header, tasks


def _lines(path: Path) -> Iterable[str]:
    """Lines of a multi-member gzip file, stopping quietly at a damaged tail."""
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        while True:
            try:
                line = handle.readline()
            except (EOFError, OSError, zlib.error):
                return
            if not line:
                return
            if not line.endswith("\n"):
                return
            yield line


def _append(path: Path, row: Mapping[str, Any]) -> None:
    with gzip.open(path, "at", encoding="utf-8") as handle:
        handle.write(json.dumps(row, sort_keys=True) + "\n")


async def record_task(
    task: ToolTask,
    model: Model,
    *,
    k: int,
    temperature: float,
    max_tokens: int,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, Any]:
    """One task's bank line: k samples of the strict call, sample 0 greedy."""
    schema = strict_schema(task)
    messages = build_messages(task)
    samples: list[dict[str, Any]] = []
    for i in range(k):
        temp = 0.0 if i == 0 else temperature
        request = ModelRequest(
            response_schema=schema,
            max_tokens=max_tokens,
            temperature=temp,
            seed=i,
            logprobs=True,
        )
        started = clock()
        completion = await model.complete(messages, request)
        seconds = clock() - started
        reply = _reply(completion.parsed, completion.text)
        calls = [{"name": c.name, "arguments": dict(c.arguments)} for c in reply.calls]
        ok = reply.error is None and score(task, reply.calls, reply.text).success
        conf = completion.confidence
        samples.append(
            {
                "index": i,
                "temperature": temp,
                "seed": i,
                "text": completion.text,
                "key": _key(reply),
                "calls": calls,
                "answer": reply.text,
                "error": reply.error,
                "success": ok,
                "logprob_mean": conf.logprob_mean if conf else None,
                "logprob_min": conf.logprob_min if conf else None,
                "logprob_low": conf.logprob_low if conf else None,
                "decision_tokens": conf.decision_tokens if conf else 0,
                "prompt_tokens": completion.usage.prompt_tokens,
                "completion_tokens": completion.usage.completion_tokens,
                "seconds": seconds,
            }
        )
    return {
        "kind": "task",
        "task_id": task.id,
        "family": task.family,
        "domain": task.domain,
        "samples": samples,
    }


async def record_bank(
    path: Path,
    tasks: Iterable[ToolTask],
    model: Model,
    header: Mapping[str, Any],
    *,
    progress: Callable[[int, dict[str, Any]], None] | None = None,
    budget_s: float | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> int:
    """Append the tasks not yet in ``path``; returns how many the file now holds.

    A file recorded with another model, split, k, temperature, prompt or max_tokens is
    refused rather than mixed. ``budget_s`` stops before a new task once spent.
    """
    old_header, done = read_bank(path)
    if old_header:
        keys = ("model", "split", "k", "temperature", "max_tokens", "prompt")
        changed = [key for key in keys if old_header.get(key) != header.get(key)]
        if changed:
            raise BankMismatchError(
                f"{path} was recorded with other settings ({', '.join(changed)}); "
                "move it away or pass the same settings"
            )
        _rewrite(path, old_header, done)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        _append(path, {"kind": "header", **header})
    seen = {row["task_id"] for row in done}
    count = len(done)
    started = clock()
    for task in tasks:
        if task.id in seen:
            continue
        if budget_s is not None and clock() - started > budget_s:
            break
        row = await record_task(
            task,
            model,
            k=int(header["k"]),
            temperature=float(header["temperature"]),
            max_tokens=int(header["max_tokens"]),
            clock=clock,
        )
        # Threads change only the seconds; each line keeps its own, as a resumed run
        # may use another count than the header's.
        _append(path, {**row, "threads": header.get("threads")})
        count += 1
        if progress is not None:
            progress(count, row)
    return count


def _rewrite(path: Path, header: Mapping[str, Any], tasks: Iterable[Mapping[str, Any]]) -> None:
    """Rewrite a bank without a damaged tail before appending to it again."""
    tmp = path.with_suffix(".tmp")
    with gzip.open(tmp, "wt", encoding="utf-8") as handle:
        for row in (header, *tasks):
            handle.write(json.dumps(row, sort_keys=True) + "\n")
    tmp.replace(path)
