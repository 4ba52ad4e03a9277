"""Run traces: where each ``StepRecord`` goes as the loop produces it, and the handover audit.

A run leaves a directory, by default ``$CLOSEDLOOP_HOME/runs/<run_id>/``, holding
``trace.jsonl`` (one step record per line, flushed as it is written, so a crash loses at
most the line being written) and ``result.json`` (the ``RunResult``, written atomically
when the run ends). Everything written goes through one redaction pass first: a trace
is read by people and shipped to dashboards, so no credential may reach it. Where a run's
files live and how they are read back is ``_trace_files``.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import tempfile
import threading
import warnings
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import IO, Any, Protocol, runtime_checkable

from pydantic import BaseModel

from .._exceptions import ConfigurationError, StoreUnavailableError
from .._redaction import redact
from ._records import RunResult, StepRecord
from ._trace_files import RESULT_FILE, TRACE_FILE, run_dir

__all__ = [
    "JsonlTrace",
    "MemoryTrace",
    "MultiSink",
    "TraceSink",
    "build_audit",
    "to_json_text",
]


@runtime_checkable
class TraceSink(Protocol):
    """Where the loop sends each step record as it happens, and the result at the end."""

    async def write(self, record: StepRecord) -> None:
        """Take one step record as its step ends."""

    async def close(self, result: RunResult) -> None:
        """Take the run's result; the run is over."""


def _finite(value: Any) -> Any:
    # JSON has no NaN or infinity; pydantic reads these strings back as the floats.
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def to_json_text(model: BaseModel) -> str:
    """A model as one line of strict JSON, secrets redacted (what every trace file holds)."""
    data = redact(model.model_dump(mode="json"))
    try:
        return json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except ValueError:
        # Only a record holding NaN or infinity gets the second walk that spells them out.
        data = _finite(data)
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _drop_partial_tail(path: Path) -> None:
    # A crash mid-write left a line without its newline; appending after it would glue the
    # next record to the fragment and corrupt both. Cut the fragment off first.
    try:
        f = open(path, "r+b")  # noqa: SIM115 - closed below
    except FileNotFoundError:
        return
    with f:
        end = f.seek(0, os.SEEK_END)
        if end == 0:
            return
        f.seek(end - 1)
        if f.read(1) == b"\n":
            return
        pos, start = end, 0
        while pos > 0:
            chunk_start = max(0, pos - 65_536)
            f.seek(chunk_start)
            newline = f.read(pos - chunk_start).rfind(b"\n")
            if newline >= 0:
                start = chunk_start + newline + 1
                break
            pos = chunk_start
        f.truncate(start)
    warnings.warn(
        f"{path}: dropped a truncated last line ({end - start} bytes) before appending",
        RuntimeWarning,
        stacklevel=4,
    )


class JsonlTrace:
    """Append each step as one JSON line to ``path``; on close, write ``result.json`` beside it.

    Lines are flushed as written (on the calling thread) and the file is fsynced on close
    (on a worker thread); the result is written to a temporary file and renamed, so a
    reader never sees half of it. Writing again after ``close`` appends to the same file
    (a run resumed after a handover continues its trace) and the next ``close`` replaces
    the result. Disk errors raise ``StoreUnavailableError`` naming the file.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        if self.path.is_dir():
            raise ConfigurationError(
                "path", str(path), f"is a directory; give the trace file, e.g. {TRACE_FILE} in it"
            )
        self.records_written = 0
        self._file: IO[str] | None = None
        # A thread lock, not an asyncio one: the file work runs in worker threads, and the
        # sink may be driven from more than one event loop (sync wrappers).
        self._lock = threading.Lock()

    @classmethod
    def for_run(cls, run_id: str) -> JsonlTrace:
        """The trace of ``run_id`` in its default directory (``run_dir(run_id)``)."""
        return cls(run_dir(run_id) / TRACE_FILE)

    @property
    def result_path(self) -> Path:
        """Where :meth:`close` writes the run's result."""
        return self.path.with_name(RESULT_FILE)

    def __repr__(self) -> str:
        return f"JsonlTrace({str(self.path)!r}, records_written={self.records_written})"

    def _open(self) -> IO[str]:
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            _drop_partial_tail(self.path)
            self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - kept open
        return self._file

    def _append(self, line: str) -> None:
        with self._lock:
            try:
                out = self._open()
                out.write(line)
                out.flush()
            except OSError as exc:
                raise StoreUnavailableError(f"trace {self.path}: cannot write ({exc})") from exc
            self.records_written += 1

    def _finish(self, result: RunResult) -> None:
        with self._lock:
            self._finish_locked(result)

    def _finish_locked(self, result: RunResult) -> None:
        try:
            out = self._open()  # a run that ended before its first step still has a trace
            out.flush()
            os.fsync(out.fileno())
            out.close()
            self._file = None
            if result.trace_path is None:
                result = result.model_copy(update={"trace_path": str(self.path)})
            _atomic_write(self.result_path, to_json_text(result) + "\n")
        except OSError as exc:
            raise StoreUnavailableError(f"trace {self.path}: cannot finish ({exc})") from exc

    async def write(self, record: StepRecord) -> None:
        """Append one record (redacted) as a line and flush it.

        On the calling thread: a flushed append lands in the page cache and costs a few
        microseconds, where a hop to a worker thread and back costs tens; the sync that
        can wait on the disk is :meth:`close`'s, and that runs on a worker thread."""
        self._append(to_json_text(record) + "\n")

    async def close(self, result: RunResult) -> None:
        """Fsync the trace and write ``result.json`` atomically."""
        await asyncio.to_thread(self._finish, result)


class MemoryTrace:
    """Keeps the records and the result in memory, as given (for tests and notebooks)."""

    def __init__(self) -> None:
        self.records: list[StepRecord] = []
        self.result: RunResult | None = None

    def __repr__(self) -> str:
        return f"MemoryTrace(records={len(self.records)}, closed={self.result is not None})"

    async def write(self, record: StepRecord) -> None:
        """Keep the record."""
        self.records.append(record)

    async def close(self, result: RunResult) -> None:
        """Keep the result."""
        self.result = result


class MultiSink:
    """Send every record and the result to each of ``sinks``, in order.

    One failing sink does not starve the others: all are called, then the first error
    is raised.
    """

    def __init__(self, *sinks: TraceSink) -> None:
        for i, sink in enumerate(sinks):
            if not isinstance(sink, TraceSink):
                raise ConfigurationError(
                    f"sinks[{i}]", sink, "must have async write(record) and close(result)"
                )
        self.sinks: tuple[TraceSink, ...] = sinks

    def __repr__(self) -> str:
        return f"MultiSink({', '.join(map(repr, self.sinks))})"

    async def write(self, record: StepRecord) -> None:
        """Write ``record`` to every sink."""
        await self._each(lambda sink: sink.write(record))

    async def close(self, result: RunResult) -> None:
        """Close every sink with ``result``."""
        await self._each(lambda sink: sink.close(result))

    async def _each(self, call: Callable[[TraceSink], Awaitable[None]]) -> None:
        first: BaseException | None = None
        for sink in self.sinks:
            try:
                await call(sink)
            except Exception as exc:
                first = first or exc
        if first is not None:
            raise first


# --- the handover audit --------------------------------------------------------------------

_MAX_KEYS = 32
_OBSERVATION_FIELDS = ("status", "source", "confidence", "meaning", "error", "value")


def _clip(value: Any, max_chars: int) -> Any:
    # Redact before cutting: a cut can leave a secret too short for the patterns to see.
    value = redact(value)
    text = json.dumps(value, ensure_ascii=False, default=repr)
    if len(text) <= max_chars:
        return value
    if isinstance(value, str):
        return f"{value[:max_chars]}…[+{len(value) - max_chars} chars]"
    if isinstance(value, dict):  # keep the keys visible, cut the values
        items = list(value.items())
        kept = {k: _clip(v, max_chars) for k, v in items[:_MAX_KEYS]}
        if len(items) > _MAX_KEYS:
            kept["…"] = f"+{len(items) - _MAX_KEYS} more keys"
        return kept
    return {"preview": text[:max_chars] + "…", "original_chars": len(text)}


def _observed(record: StepRecord, max_chars: int) -> dict[str, Any]:
    observation = record.observation
    action = record.action
    return {
        "step": record.step,
        "phase": record.phase,
        "step_type": record.step_type,
        "action": None
        if action is None
        else {"tool": action.tool, "arguments": _clip(action.arguments, max_chars)},
        "final_answer": None
        if record.final_answer is None
        else _clip(record.final_answer, max_chars),
        "observation": None
        if observation is None
        else {
            k: _clip(observation[k], max_chars)
            for k in _OBSERVATION_FIELDS
            if observation.get(k) is not None
        },
        "validation_errors": [_clip(e, max_chars) for e in record.validation_errors],
        "e": record.error,
        "quality": record.quality,
        "f_est": record.f_est,
        "protocol": record.protocol,
        "notes": [_clip(n, max_chars) for n in record.notes],
    }


def build_audit(
    records: Sequence[StepRecord],
    failed_checks: Sequence[str],
    suggested_fix: str | None,
    *,
    max_steps: int = 8,
    max_chars: int = 500,
) -> dict[str, Any]:
    """The audit list a reviewer reads: what was observed, which checks failed, a fix.

    Keeps the last ``max_steps`` steps (``omitted_steps`` counts the rest), cuts any
    argument, answer or observed value longer than ``max_chars`` characters of JSON, and
    redacts secrets. ``summary`` gives the run's trajectory in numbers. The result is
    what ``HandoverQueue.submit`` takes as ``audit``.
    """
    if isinstance(failed_checks, str):
        raise ConfigurationError("failed_checks", failed_checks, "must be a list of strings")
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
        raise ConfigurationError("max_steps", max_steps, "must be an integer >= 1")
    if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 16:
        raise ConfigurationError("max_chars", max_chars, "must be an integer >= 16")
    kept = list(records)[-max_steps:]
    summary: dict[str, Any] = {"steps": len(records)}
    if records:
        errors = [r.error for r in records]
        last = records[-1]
        summary |= {
            "last_step": last.step,
            "phase": last.phase,
            "protocol": last.protocol,
            "f_est": last.f_est,
            "mean_e": sum(errors) / len(errors),
            "max_e": max(errors),
            "tools": sorted({r.action.tool for r in records if r.action is not None}),
        }
    audit = {
        "observed": [_observed(r, max_chars) for r in kept],
        "omitted_steps": len(records) - len(kept),
        "failed_checks": [str(c) for c in failed_checks],
        "suggested_fix": suggested_fix,
        "summary": summary,
    }
    redacted: dict[str, Any] = redact(_finite(audit))
    return redacted
