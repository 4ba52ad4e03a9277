"""A run's files: where they live and how they are read back.

A run leaves a directory, by default ``$CLOSEDLOOP_HOME/runs/<run_id>/``, holding
``trace.jsonl`` and ``result.json`` (see ``_trace``, which writes them). Reading is
forgiving only of what a crash can leave behind, a last line without its newline;
anything else that is not a trace is an error naming the file and the line.
"""

from __future__ import annotations

import json
import os
import re
import warnings
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from .._exceptions import ConfigurationError
from .._home import closedloop_home
from ._records import RunResult, StepRecord

__all__ = [
    "RESULT_FILE",
    "TRACE_FILE",
    "RunPaths",
    "read_trace",
    "resolve_run",
    "run_dir",
    "runs_root",
]

TRACE_FILE = "trace.jsonl"
RESULT_FILE = "result.json"
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-]{0,199}$")


def runs_root() -> Path:
    """Where runs are kept: ``$CLOSEDLOOP_HOME/runs``."""
    return closedloop_home() / "runs"


def run_dir(run_id: str) -> Path:
    """The directory of run ``run_id`` under :func:`runs_root`."""
    if not isinstance(run_id, str) or not _RUN_ID.match(run_id) or set(run_id) == {"."}:
        raise ConfigurationError(
            "run_id", run_id, "must be 1-200 letters, digits, '.', '_' or '-' (not a path)"
        )
    return runs_root() / run_id


@dataclass(frozen=True, slots=True)
class RunPaths:
    """The files of one run: its directory, its trace and its result (either may be missing)."""

    run_dir: Path
    trace: Path
    result: Path


def resolve_run(run: str | os.PathLike[str]) -> RunPaths:
    """Find a run from a trace file, a run directory, or a run id under ``$CLOSEDLOOP_HOME``.

    Raises ``ConfigurationError`` naming ``run`` and every place looked at when none fits.
    """
    text = os.fspath(run)
    if not text:
        raise ConfigurationError("RUN", text, "give a run id, a run directory or a trace file")
    path = Path(text).expanduser()
    if path.is_file():
        return RunPaths(path.parent, path, path.parent / RESULT_FILE)
    looked = [f"{path} (a trace file or run directory)"]
    candidates = [path] if path.is_dir() else []
    if _RUN_ID.match(text) and set(text) != {"."}:
        candidates.append(run_dir(text))
        looked.append(f"{run_dir(text)} (run id under $CLOSEDLOOP_HOME/runs)")
    for directory in candidates:
        paths = RunPaths(directory, directory / TRACE_FILE, directory / RESULT_FILE)
        if paths.trace.is_file() or paths.result.is_file():
            return paths
    raise ConfigurationError(
        "RUN",
        text,
        f"no run found (no {TRACE_FILE} or {RESULT_FILE}); looked at " + "; ".join(looked),
    )


def _paths_of(target: str | os.PathLike[str] | RunPaths) -> RunPaths:
    if isinstance(target, RunPaths):
        return target
    path = Path(target).expanduser()
    if path.is_dir():
        return RunPaths(path, path / TRACE_FILE, path / RESULT_FILE)
    if path.is_file():
        return RunPaths(path.parent, path, path.parent / RESULT_FILE)
    raise ConfigurationError("path", str(target), "no such trace file or run directory")


def _parse_line(line: bytes) -> StepRecord:
    return StepRecord.model_validate(json.loads(line.decode("utf-8")))


def _why(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        return f"{'.'.join(map(str, first['loc'])) or 'record'}: {first['msg']}"
    return str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__


def _read_records(path: Path) -> list[StepRecord]:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigurationError("trace", str(path), f"cannot be read ({exc.strerror})") from None
    lines = data.split(b"\n")
    tail = lines.pop()  # b"" when the file ends with a newline, else an unterminated line
    records: list[StepRecord] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            records.append(_parse_line(line))
        except (ValueError, ValidationError) as exc:
            what = "is not a closedloop trace" if not records else "is corrupt"
            raise ConfigurationError(
                "trace", str(path), f"{what}: line {number} is not a step record ({_why(exc)})"
            ) from None
    if tail.strip():
        try:
            records.append(_parse_line(tail))
        except (ValueError, ValidationError) as exc:
            if not tail.lstrip().startswith(b"{"):
                raise ConfigurationError(
                    "trace", str(path), f"is not a closedloop trace ({_why(exc)})"
                ) from None
            # A crash mid-write leaves the last line without its newline: keep the rest.
            warnings.warn(
                f"{path}: skipped a truncated last line (line {len(lines) + 1}, "
                f"{len(tail)} bytes); the run probably stopped while writing it",
                RuntimeWarning,
                stacklevel=3,
            )
    return records


def _read_result(path: Path) -> RunResult:
    try:
        return RunResult.model_validate_json(path.read_bytes())
    except (OSError, ValueError, ValidationError) as exc:
        raise ConfigurationError(
            "result", str(path), f"is not a closedloop run result ({_why(exc)})"
        ) from None


def read_trace(
    target: str | os.PathLike[str] | RunPaths,
) -> tuple[list[StepRecord], RunResult | None]:
    """The step records of a run and its result (None while running or after a crash).

    ``target`` is a trace file or a run directory. A truncated last line (a crash in the
    middle of a write) is skipped with a ``RuntimeWarning``; any other unreadable line, or
    a file that is not a trace, raises ``ConfigurationError`` naming the file and line.
    Without a trace file the records come from the result.
    """
    paths = _paths_of(target)
    result = _read_result(paths.result) if paths.result.is_file() else None
    if not paths.trace.is_file():
        if result is None:
            raise ConfigurationError(
                "path", str(paths.run_dir), f"holds neither {TRACE_FILE} nor {RESULT_FILE}"
            )
        return list(result.steps), result
    records = _read_records(paths.trace)
    if result is not None and records and result.run_id != records[0].run_id:
        warnings.warn(
            f"{paths.result} belongs to run {result.run_id!r}, not {records[0].run_id!r}; ignored",
            RuntimeWarning,
            stacklevel=2,
        )
        result = None
    return records, result
