"""The child side of the sandbox: run candidate code and its checks, one JSON line per event.

Run as a script by :mod:`._sandbox` under ``python -I -B``; it imports only the standard
library. Usage: ``python -I -B _runner.py PAYLOAD.json RESULTS.jsonl``.

Before any candidate code runs, the child limits itself (CPU, address space, file size,
open files, processes), tries to move into an empty network namespace, and installs an
audit hook that refuses sockets, new processes, ctypes and writes outside the working
directory. Limits are set here rather than in a ``preexec_fn`` because the parent is an
asyncio program with helper threads, where ``preexec_fn`` is documented as unsafe.

The audit hook is a tripwire for accidents, not a security boundary: code in the same
interpreter can reach around it. The rlimits, the network namespace (where the machine
allows one), the process group kill and the output caps are what the parent relies on.
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
import reprlib
import resource
import signal
import socket
import sys
import traceback
from collections.abc import Callable
from types import CodeType, FrameType
from typing import Any

_CLONE_NEWNET = 0x40000000
_CLONE_NEWUSER = 0x10000000
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
_PROCESS_EVENTS = frozenset(
    {
        "os.exec",
        "os.fork",
        "os.forkpty",
        "os.kill",
        "os.killpg",
        "os.posix_spawn",
        "os.spawn",
        "os.startfile",
        "os.system",
        "pty.spawn",
        "signal.pthread_kill",
        "subprocess.Popen",
    }
)
_PATH_EVENTS = frozenset(
    {
        "os.chdir",
        "os.chflags",
        "os.chmod",
        "os.chown",
        "os.link",
        "os.mkdir",
        "os.remove",
        "os.removexattr",
        "os.rename",
        "os.rmdir",
        "os.setxattr",
        "os.symlink",
        "os.truncate",
        "os.utime",
        "shutil.chown",
        "shutil.copyfile",
        "shutil.copymode",
        "shutil.copystat",
        "shutil.copytree",
        "shutil.move",
        "shutil.rmtree",
    }
)
_CHECK_FILE = "<check>"
_CODE_FILE = "<candidate>"
_RECORD = "__closedloop_call__"


class _Timeout(BaseException):
    """Raised by the alarm; a BaseException so ``except Exception`` in candidate code lets it by."""


def _emit(fd: int, event: dict[str, Any]) -> None:
    os.write(fd, (json.dumps(event) + "\n").encode("utf-8", "replace"))


def _limit(kind: int, value: int) -> None:
    # A limit the machine will not lower is not a reason to refuse to run.
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(kind, (value, value))


def _isolate_network() -> bool:
    """Enter an empty network namespace if the kernel lets us; True when nothing but lo is left."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.unshare(_CLONE_NEWNET) != 0 and libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNET) != 0:
            return False
        return all(name == "lo" for _, name in socket.if_nameindex())
    except (OSError, AttributeError, ImportError):
        return False


def _install_hook(root: str) -> None:
    root = os.path.realpath(root)
    busy = [False]

    def other_process(path: Any) -> bool:
        # /proc/<pid>/ of another process (the harness's own environ, say) is readable by
        # the same uid whatever the sandbox does; only this process's own entries are fine.
        if isinstance(path, int):
            return False
        parts = os.path.normpath(os.path.abspath(os.fsdecode(path))).split(os.sep)
        if len(parts) < 3 or parts[1] != "proc":
            return False
        return (parts[2].isdigit() and int(parts[2]) != os.getpid()) or parts[2] == "thread-self"

    def inside(path: Any) -> bool:
        if isinstance(path, int):
            return True  # an already open descriptor: its opening was checked
        real = os.path.realpath(os.fsdecode(path))
        return real == root or real.startswith(root + os.sep)

    def refuse(what: str, event: str) -> None:
        raise PermissionError(f"sandbox: {what} is not allowed ({event})")

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if busy[0]:
            return
        busy[0] = True
        try:
            if event.startswith("socket."):
                refuse("network access", event)
            elif event in _PROCESS_EVENTS:
                refuse("starting or signalling processes", event)
            elif event.startswith("ctypes."):
                refuse("ctypes", event)
            elif event in ("resource.setrlimit", "resource.prlimit"):
                refuse("changing resource limits", event)
            elif event == "open":
                path, mode, flags = args
                writes = bool(flags and flags & _WRITE_FLAGS) or bool(
                    isinstance(mode, str) and set(mode) & set("wax+")
                )
                if writes and not inside(path):
                    refuse(f"writing outside the working directory ({path!r})", event)
                if other_process(path):
                    refuse(f"reading another process's files ({path!r})", event)
            elif event in _PATH_EVENTS:
                for arg in args[:2]:
                    if isinstance(arg, str | bytes | os.PathLike) and not inside(arg):
                        refuse(f"touching a path outside the working directory ({arg!r})", event)
        finally:
            busy[0] = False

    sys.addaudithook(hook)


def _on_alarm(signum: int, frame: FrameType | None) -> None:
    raise _Timeout


class _Recorder:
    """Remembers the last call of the function under test, with its arguments, for feedback."""

    def __init__(self, short: Callable[[object], str]) -> None:
        self.short = short
        self.last: str | None = None
        self.result: str | None = None

    def __call__(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        shown = [self.short(a) for a in args] + [f"{k}={self.short(v)}" for k, v in kwargs.items()]
        self.last = f"{getattr(fn, '__name__', 'candidate')}({', '.join(shown)})"
        self.result = None
        result = fn(*args, **kwargs)
        self.result = self.short(result)
        return result


class _WrapCalls(ast.NodeTransformer):
    """Route calls of the entry point through the recorder: ``f(x)`` becomes ``rec(f, x)``."""

    def __init__(self, names: frozenset[str]) -> None:
        self.names = names

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.func, ast.Name) and node.func.id in self.names:
            return ast.Call(
                func=ast.Name(id=_RECORD, ctx=ast.Load()),
                args=[node.func, *node.args],
                keywords=node.keywords,
            )
        return node


def _compile_test(test: str, names: frozenset[str]) -> tuple[str, list[CodeType]]:
    """("eq", [left, right]) | ("expr", [expr]) | ("stmt", [block])."""
    try:
        tree = ast.parse(test, mode="eval")
    except SyntaxError:
        block = ast.fix_missing_locations(_WrapCalls(names).visit(ast.parse(test, mode="exec")))
        return "stmt", [compile(block, _CHECK_FILE, "exec")]
    body = tree.body
    if isinstance(body, ast.Compare) and len(body.ops) == 1 and isinstance(body.ops[0], ast.Eq):
        parts = [body.left, body.comparators[0]]
        codes = [
            compile(
                ast.fix_missing_locations(ast.Expression(_WrapCalls(names).visit(p))),
                _CHECK_FILE,
                "eval",
            )
            for p in parts
        ]
        return "eq", codes
    wrapped = ast.fix_missing_locations(ast.Expression(_WrapCalls(names).visit(body)))
    return "expr", [compile(wrapped, _CHECK_FILE, "eval")]


def _where(exc: BaseException, code_lines: list[str], test_lines: list[str]) -> str:
    """The innermost line of candidate (or check) code the exception passed through."""
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if frame.filename == _CODE_FILE and frame.lineno and frame.lineno <= len(code_lines):
            return f" (line {frame.lineno}: {code_lines[frame.lineno - 1].strip()})"
        if frame.filename == _CHECK_FILE and frame.lineno and frame.lineno <= len(test_lines):
            return f" (at: {test_lines[frame.lineno - 1].strip()})"
    return ""


def _describe(exc: BaseException, code_lines: list[str], test_lines: list[str]) -> str:
    if isinstance(exc, _Timeout):
        return "timeout"
    if isinstance(exc, SystemExit):
        return f"called exit({exc.code!r})"
    text = str(exc)
    if isinstance(exc, AssertionError) and not text:
        text = "assertion failed"
    if isinstance(exc, MemoryError) and not text:
        text = "out of memory (the sandbox's address-space limit)"
    head = f"raised {type(exc).__name__}: {text}" if text else f"raised {type(exc).__name__}"
    return head[:300] + _where(exc, code_lines, test_lines)


def _timed(seconds: float, fn: Callable[[], Any]) -> Any:
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return fn()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def _load(payload: dict[str, Any], out: int) -> tuple[dict[str, Any], list[str]] | None:
    code: str = payload["code"]
    code_lines = code.splitlines()
    entry: str = payload["entry_point"]
    namespace: dict[str, Any] = {"__name__": "__candidate__", "__builtins__": __builtins__}
    try:
        compiled = compile(code, _CODE_FILE, "exec")
    except (SyntaxError, ValueError) as exc:
        line = getattr(exc, "lineno", None)
        msg = getattr(exc, "msg", str(exc))
        _emit(
            out,
            {
                "event": "load",
                "ok": False,
                "kind": "syntax_error",
                "error": f"line {line}: {msg}" if line else str(msg),
            },
        )
        return None

    def run() -> None:
        if payload["preamble"]:
            exec(compile(payload["preamble"], "<preamble>", "exec"), namespace)
        exec(compiled, namespace)
        if payload["support"]:
            exec(compile(payload["support"], "<support>", "exec"), namespace)

    try:
        _timed(payload["load_timeout_s"], run)
    except _Timeout:
        _emit(
            out,
            {
                "event": "load",
                "ok": False,
                "kind": "timeout",
                "error": f"loading the code took longer than {payload['load_timeout_s']} s",
            },
        )
        return None
    except MemoryError:
        _emit(
            out,
            {
                "event": "load",
                "ok": False,
                "kind": "memory",
                "error": "MemoryError while loading the code",
            },
        )
        return None
    except BaseException as exc:  # the candidate's failure is data, not our crash
        _emit(
            out,
            {
                "event": "load",
                "ok": False,
                "kind": "load_error",
                "error": _describe(exc, code_lines, []),
            },
        )
        return None
    if entry not in namespace:
        _emit(
            out,
            {
                "event": "load",
                "ok": False,
                "kind": "load_error",
                "error": f"the code does not define {entry!r}",
            },
        )
        return None
    _emit(out, {"event": "load", "ok": True})
    return namespace, code_lines


def _run_check(
    check: dict[str, Any], module: dict[str, Any], code_lines: list[str], payload: dict[str, Any]
) -> dict[str, Any]:
    short = reprlib.Repr()
    short.maxstring = short.maxother = payload["max_repr"]
    short.maxlist = short.maxtuple = short.maxset = short.maxdict = 20
    entry: str = payload["entry_point"]
    recorder = _Recorder(short.repr)
    namespace = dict(module)
    namespace["candidate"] = module[entry]
    namespace[_RECORD] = recorder
    test: str = check["test"]
    result: dict[str, Any] = {"event": "check", "name": check["name"], "passed": False}

    def run() -> None:
        if check["setup"]:
            exec(compile(check["setup"], _CHECK_FILE, "exec"), namespace)
        kind, codes = _compile_test(test, frozenset({"candidate", entry}))
        if kind == "eq":
            got = eval(codes[0], namespace)
            result["got"] = short.repr(got)
            expected = eval(codes[1], namespace)
            result["expected"] = short.repr(expected)
            result["passed"] = bool(got == expected)
        elif kind == "expr":
            value = eval(codes[0], namespace)
            result["passed"] = bool(value)
            result["got"] = recorder.result if recorder.result is not None else short.repr(value)
            if not result["passed"]:
                result["error"] = f"the condition is false: {test.strip()}"[:300]
        else:
            exec(codes[0], namespace)
            result["passed"] = True

    try:
        _timed(payload["check_timeout_s"], run)
    except _Timeout:
        result["error"] = f"timeout: the check ran longer than {payload['check_timeout_s']} s"
        result["passed"] = False
    except BaseException as exc:  # any failure of candidate code fails this check only
        result["error"] = _describe(exc, code_lines, test.splitlines())
        result["passed"] = False
        if recorder.result is not None and "got" not in result:
            result["got"] = recorder.result
    if recorder.last is not None:
        result["last_call"] = recorder.last
    return result


def main(argv: list[str]) -> int:
    with open(argv[1], encoding="utf-8") as fh:
        payload: dict[str, Any] = json.load(fh)
    out = os.open(argv[2], os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    limits: dict[str, int] = payload["limits"]
    network_isolated = _isolate_network() if payload["isolate_network"] else False
    _limit(resource.RLIMIT_CORE, 0)
    _limit(resource.RLIMIT_CPU, limits["cpu_s"])
    _limit(resource.RLIMIT_AS, limits["memory_bytes"])
    _limit(resource.RLIMIT_FSIZE, limits["fsize_bytes"])
    _limit(resource.RLIMIT_NOFILE, limits["nofile"])
    _limit(resource.RLIMIT_NPROC, limits["nproc"])
    os.chdir(payload["work_dir"])
    signal.signal(signal.SIGALRM, _on_alarm)
    _install_hook(payload["work_dir"])
    _emit(out, {"event": "start", "network_isolated": network_isolated})

    loaded = _load(payload, out)
    if loaded is not None:
        module, code_lines = loaded
        for check in payload["checks"]:
            _emit(out, {"event": "begin", "name": check["name"]})
            _emit(out, _run_check(check, module, code_lines, payload))
    _emit(out, {"event": "done"})
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        # Threads the candidate left running must not keep the process alive.
        os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
