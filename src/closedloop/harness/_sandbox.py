"""Run untrusted generated code against a task's checks in a limited child process.

Layers, from the outside in:

- a fresh temporary directory as the working directory, removed afterwards;
- ``python -I -B`` (isolated mode: no environment variables, no user site, no script
  directory on the path; no bytecode written) with an environment stripped to a few
  variables;
- a new session, so a wall-clock timeout kills the whole process group;
- stdout and stderr read with a cap: the first bytes are kept, and a child that prints
  more than ``max_output_bytes`` is stopped;
- inside the child (see ``_runner.py``): rlimits on CPU time, address space, file size,
  open files and processes; an empty network namespace where the kernel allows one; an
  audit hook that refuses sockets, subprocesses, ctypes and writes outside the directory.

Audit hooks are not a security boundary: Python code can get around them. The sandbox
keeps accidents (an endless loop, a runaway allocation, a stray ``rm``, a fork bomb, a
megabyte of prints) from hurting the host or the harness; it is not meant to contain a
determined attacker, and code that wanted to could also forge its own results. Run
hostile code in a container or VM. ``RLIMIT_NPROC`` does not bind root; as root, forks
are stopped by the audit hook and the process-group kill only.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._exceptions import ConfigurationError
from .._validation import require_int_at_least, require_positive
from ._evaluation import CheckResult, Evaluation, EvaluationStatus, not_run
from ._tasks import CodeTask

__all__ = ["Sandbox", "SandboxLimits"]

_RUNNER = Path(__file__).with_name("_runner.py")
_MIB = 1024 * 1024


@dataclass(frozen=True, slots=True, kw_only=True)
class SandboxLimits:
    """Limits for one run of a task's checks.

    Args:
        check_timeout_s: wall-clock time for one check; past it the check fails and the
            next one runs.
        load_timeout_s: wall-clock time for loading the code (module level).
        wall_timeout_s: the whole run; ``None`` means load + checks × check timeout + 5 s.
        cpu_s: CPU seconds for the whole child; ``None`` means the wall timeout, rounded up.
        memory_mb: address-space limit of the child.
        file_size_mb: largest file the child may write.
        max_open_files: file descriptors the child may hold.
        max_processes: processes (and threads, where the kernel counts them) the child's
            user may add; 0 forbids forking. Root is exempt by the kernel.
        max_output_bytes: stdout plus stderr beyond which the child is stopped.
        keep_output_bytes: how much of each stream is kept for the report.
        max_repr: longest ``got`` / ``expected`` text reported for a check.
        isolate_network: try an empty network namespace (needs root or user namespaces).
    """

    check_timeout_s: float = 2.0
    load_timeout_s: float = 5.0
    wall_timeout_s: float | None = None
    cpu_s: float | None = None
    memory_mb: int = 512
    file_size_mb: int = 4
    max_open_files: int = 64
    max_processes: int = 0
    max_output_bytes: int = _MIB
    keep_output_bytes: int = 8 * 1024
    max_repr: int = 200
    isolate_network: bool = True

    def __post_init__(self) -> None:
        require_positive("check_timeout_s", self.check_timeout_s)
        require_positive("load_timeout_s", self.load_timeout_s)
        if self.wall_timeout_s is not None:
            require_positive("wall_timeout_s", self.wall_timeout_s)
        if self.cpu_s is not None:
            require_positive("cpu_s", self.cpu_s)
        require_int_at_least("memory_mb", self.memory_mb, 64)
        require_int_at_least("file_size_mb", self.file_size_mb, 1)
        require_int_at_least("max_open_files", self.max_open_files, 16)
        require_int_at_least("max_processes", self.max_processes, 0)
        require_int_at_least("max_output_bytes", self.max_output_bytes, 1024)
        require_int_at_least("keep_output_bytes", self.keep_output_bytes, 0)
        require_int_at_least("max_repr", self.max_repr, 20)

    def wall_timeout_for(self, checks: int) -> float:
        """The wall-clock limit of a run with ``checks`` checks."""
        if self.wall_timeout_s is not None:
            return self.wall_timeout_s
        return self.load_timeout_s + checks * self.check_timeout_s + 5.0


@dataclass(slots=True)
class _Stream:
    keep: int
    data: bytearray = field(default_factory=bytearray)
    seen: int = 0

    def text(self) -> str:
        body = self.data.decode("utf-8", "replace")
        if self.seen > len(self.data):
            body += f"\n[... {self.seen - len(self.data)} more bytes not kept]"
        return body


async def _drain(
    reader: asyncio.StreamReader | None, stream: _Stream, over: Callable[[], bool]
) -> None:
    if reader is None:
        return
    # Read to the end even past the cap: a paused pipe never reports EOF, and asyncio's
    # Process.wait() waits for the pipes to close as well as for the exit.
    while chunk := await reader.read(65536):
        stream.seen += len(chunk)
        room = stream.keep - len(stream.data)
        if room > 0:
            stream.data += chunk[:room]
        over()


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


class Sandbox:
    """Runs code against a task's checks in a limited subprocess; see the module docstring.

    ``await sandbox.run(task, code) -> Evaluation``; ``run_sync`` for scripts. Never raises
    for anything the code does: every misbehaviour becomes an :class:`Evaluation`.
    """

    def __init__(
        self,
        limits: SandboxLimits | None = None,
        *,
        python: str | None = None,
        temp_root: str | os.PathLike[str] | None = None,
    ) -> None:
        self.limits = SandboxLimits() if limits is None else limits
        if not isinstance(self.limits, SandboxLimits):
            raise ConfigurationError("limits", limits, "must be a SandboxLimits")
        self.python = sys.executable if python is None else python
        self.temp_root = None if temp_root is None else os.fspath(temp_root)

    def __repr__(self) -> str:
        return f"Sandbox(limits={self.limits!r})"

    def run_sync(self, task: CodeTask, code: str) -> Evaluation:
        """Blocking form of :meth:`run`, for scripts and notebooks without a loop."""
        return asyncio.run(self.run(task, code))

    async def run(self, task: CodeTask, code: str) -> Evaluation:
        """Run ``code`` (the candidate module) against every check of ``task``."""
        if not code.strip():
            return not_run(task, EvaluationStatus.NO_CODE, "there is no code to run", 0.0)
        started = time.perf_counter()
        root = Path(tempfile.mkdtemp(prefix="closedloop-sandbox-", dir=self.temp_root))
        try:
            work = root / "work"
            work.mkdir()
            payload_path = root / "payload.json"
            results_path = root / "results.jsonl"
            payload_path.write_text(json.dumps(self._payload(task, code, work)), encoding="utf-8")
            outcome = await self._spawn(task, work, payload_path, results_path)
            events = _read_events(results_path)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        return _evaluation(task, events, outcome, time.perf_counter() - started, self.limits)

    def _payload(self, task: CodeTask, code: str, work: Path) -> dict[str, Any]:
        lim = self.limits
        wall = lim.wall_timeout_for(len(task.checks))
        cpu = lim.cpu_s if lim.cpu_s is not None else wall
        return {
            "code": code,
            "preamble": task.preamble,
            "support": task.support,
            "entry_point": task.entry_point,
            "checks": [{"name": c.name, "setup": c.setup, "test": c.test} for c in task.checks],
            "check_timeout_s": lim.check_timeout_s,
            "load_timeout_s": lim.load_timeout_s,
            "work_dir": str(work),
            "max_repr": lim.max_repr,
            "isolate_network": lim.isolate_network,
            "limits": {
                "cpu_s": max(1, math.ceil(cpu)),
                "memory_bytes": lim.memory_mb * _MIB,
                "fsize_bytes": lim.file_size_mb * _MIB,
                "nofile": lim.max_open_files,
                "nproc": lim.max_processes,
            },
        }

    async def _spawn(
        self, task: CodeTask, work: Path, payload_path: Path, results_path: Path
    ) -> _Outcome:
        env = {
            "PATH": "/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "HOME": str(work),
            "TMPDIR": str(work),
        }
        try:
            proc = await self._start(work, payload_path, results_path, env)
        except OSError as exc:
            raise ConfigurationError("python", self.python, f"cannot start it: {exc}") from exc
        return await self._watch(task, proc)

    async def _start(
        self, work: Path, payload_path: Path, results_path: Path, env: dict[str, str]
    ) -> asyncio.subprocess.Process:
        return await asyncio.create_subprocess_exec(
            self.python,
            "-I",
            "-B",
            str(_RUNNER),
            str(payload_path),
            str(results_path),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=str(work),
            env=env,
            start_new_session=True,
        )

    async def _watch(self, task: CodeTask, proc: asyncio.subprocess.Process) -> _Outcome:
        lim = self.limits
        out, err = _Stream(lim.keep_output_bytes), _Stream(lim.keep_output_bytes)
        flooded = asyncio.Event()

        def over() -> bool:
            if out.seen + err.seen > lim.max_output_bytes:
                flooded.set()
                return True
            return False

        drains = asyncio.gather(_drain(proc.stdout, out, over), _drain(proc.stderr, err, over))
        flood_wait = asyncio.ensure_future(flooded.wait())
        exit_wait = asyncio.ensure_future(proc.wait())
        timed_out = False
        try:
            done, _ = await asyncio.wait(
                {exit_wait, flood_wait},
                timeout=lim.wall_timeout_for(len(task.checks)),
                return_when=asyncio.FIRST_COMPLETED,
            )
            timed_out = not done
        finally:
            # Always: stray grandchildren die with the group, even on cancellation.
            _kill_group(proc.pid)
            flood_wait.cancel()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(drains, timeout=5.0)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(exit_wait), timeout=5.0)
            exit_wait.cancel()
        returncode = proc.returncode
        return _Outcome(
            returncode=-signal.SIGKILL if returncode is None else returncode,
            timed_out=timed_out,
            flooded=flooded.is_set(),
            stdout=out.text(),
            stderr=err.text(),
            output_bytes=out.seen + err.seen,
        )


@dataclass(frozen=True, slots=True)
class _Outcome:
    returncode: int
    timed_out: bool
    flooded: bool
    stdout: str
    stderr: str
    output_bytes: int


def _read_events(path: Path) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return events
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            break  # a torn last line: the child died while writing it
        if isinstance(event, dict):
            events.append(event)
    return events


_LOAD_STATUS = {
    "syntax_error": EvaluationStatus.SYNTAX_ERROR,
    "timeout": EvaluationStatus.TIMEOUT,
    "memory": EvaluationStatus.MEMORY_LIMIT,
    "load_error": EvaluationStatus.LOAD_ERROR,
}


def _death(outcome: _Outcome, limits: SandboxLimits, wall: float) -> tuple[EvaluationStatus, str]:
    """Why the child stopped before finishing, in words a user (and a model) can act on."""
    code = outcome.returncode
    if outcome.flooded:
        return (
            EvaluationStatus.OUTPUT_LIMIT,
            f"the code printed more than {limits.max_output_bytes} bytes; the run was stopped",
        )
    if outcome.timed_out:
        return EvaluationStatus.TIMEOUT, f"the run exceeded its wall-clock limit of {wall:g} s"
    if code == -signal.SIGXCPU:
        return EvaluationStatus.CPU_LIMIT, "the run exceeded its CPU-time limit"
    if code == -signal.SIGKILL:
        return EvaluationStatus.MEMORY_LIMIT, "the process was killed (out of memory?)"
    if code < 0:
        name = signal.Signals(-code).name if -code in signal.valid_signals() else str(-code)
        return EvaluationStatus.CRASHED, f"the interpreter died of signal {name}"
    tail = outcome.stderr.strip().splitlines()[-1:] or [""]
    detail = f": {tail[0][:200]}" if tail[0] else ""
    return (
        EvaluationStatus.CRASHED,
        f"the process exited with status {code} before the checks finished{detail}",
    )


def _evaluation(
    task: CodeTask,
    events: list[dict[str, Any]],
    outcome: _Outcome,
    duration: float,
    limits: SandboxLimits,
) -> Evaluation:
    extra: dict[str, Any] = {
        "stdout": outcome.stdout,
        "stderr": outcome.stderr,
        "network_isolated": any(
            e.get("event") == "start" and e.get("network_isolated") for e in events
        ),
    }
    finished = any(e.get("event") == "done" for e in events)
    wall = limits.wall_timeout_for(len(task.checks))
    load = next((e for e in events if e.get("event") == "load"), None)
    if load is not None and not load.get("ok"):
        status = _LOAD_STATUS.get(str(load.get("kind")), EvaluationStatus.LOAD_ERROR)
        return not_run(task, status, str(load.get("error")), duration, **extra)
    death: tuple[EvaluationStatus, str] | None = None
    if not finished or outcome.flooded or outcome.timed_out:
        death = _death(outcome, limits, wall)
    if load is None:
        assert death is not None
        status, reason = death
        return not_run(task, status, f"{reason} (while loading the code)", duration, **extra)

    reported = {str(e["name"]): e for e in events if e.get("event") == "check" and "name" in e}
    running = next((str(e["name"]) for e in reversed(events) if e.get("event") == "begin"), None)
    results: list[CheckResult] = []
    for check in task.checks:
        event = reported.get(check.name)
        if event is None:
            assert death is not None
            reason = f"stopped: {death[1]}" if check.name == running else f"not run: {death[1]}"
            results.append(
                CheckResult(name=check.name, passed=False, call=check.call, error=reason)
            )
            continue
        results.append(
            CheckResult(
                name=check.name,
                passed=bool(event.get("passed")),
                call=_call_text(check.call, event),
                got=_opt_str(event.get("got")),
                expected=_opt_str(event.get("expected")),
                error=_opt_str(event.get("error")),
            )
        )
    checks = tuple(results)
    passed = sum(1 for c in checks if c.passed)
    if death is not None:
        status, reason = death
        reason = f"{reason}; {passed} of {len(checks)} checks passed"
    elif passed == len(checks):
        status, reason = EvaluationStatus.PASSED, f"all {len(checks)} checks passed"
    else:
        status, reason = EvaluationStatus.FAILED, f"{passed} of {len(checks)} checks passed"
    return Evaluation(status=status, reason=reason, checks=checks, duration_s=duration, **extra)


def _call_text(call: str, event: dict[str, Any]) -> str:
    last = event.get("last_call")
    # A block of statements says little by itself; the last call it made says what broke.
    if isinstance(last, str) and "\n" in call:
        return f"{last} (last call of the check)"
    return call


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)
