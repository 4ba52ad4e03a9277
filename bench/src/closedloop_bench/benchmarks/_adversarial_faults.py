"""The faults matrix: world faults, a model server killed mid-call, a full disk, Redis down.

Each row counts tasks completed, handed over and failed, irreversible effects duplicated
(must be 0) and committed state lost (must be 0; ``None`` where the row keeps no
durable state to lose). SIGKILL of the agent's own process at each point of a step is
covered by ``tests/agent/test_crash_resume.py``; the row here runs that file.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from closedloop import Runtime
from closedloop._exceptions import ClosedLoopError, StoreUnavailableError
from closedloop.agent import Agent, HaltReason, Task
from closedloop.feedback import SQLiteStore, StateStore
from closedloop.models import OpenAICompatible, ScriptedModel

from ..world import EndpointFaults, FixedLatency, Outage, WorldFaultProfile
from ._adversarial_input import _Effects, _tools, _typed_error
from ._adversarial_store import audit_sqlite
from ._runner import FaultsConfig, make_runner, plan_jobs, run_jobs

__all__ = ["WORLD_FAULTS", "FaultRow", "run_fault_matrix"]


@dataclass(frozen=True, slots=True)
class FaultRow:
    """One row of the matrix."""

    fault: str
    tasks: int
    completed: int
    handed_over: int
    failed: int
    duplicated_effects: int
    state_lost: int | None
    typed_errors: int = 0
    note: str = ""
    errors: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _profile(name: str, **faults: Any) -> WorldFaultProfile:
    return WorldFaultProfile(name=name, default=EndpointFaults(**faults))


WORLD_FAULTS: dict[str, tuple[WorldFaultProfile, float]] = {
    # name: (profile, tool timeout in seconds)
    "timeouts": (_profile("timeouts", latency=FixedLatency(ms=400.0)), 0.1),
    "429_storm": (_profile("storm429", rate_limit_rate=0.7, retry_after_s=0.05), 2.0),
    "5xx_burst": (_profile("burst5xx", error_rate=0.6, error_statuses=(500, 502, 503)), 2.0),
    "empty_results": (_profile("empty", empty_rate=0.8), 2.0),
    "schema_drift": (_profile("drift", drift_rate=0.8), 2.0),
    "outage_window": (
        _profile("outage", outages=(Outage(unit="requests", start=0, end=3, retry_after_s=0.05),)),
        2.0,
    ),
    "commit_then_fail": (_profile("commitfail", commit_then_fail_rate=0.5), 2.0),
}


async def world_rows(root: Path, episodes: int) -> list[FaultRow]:
    """Every world fault on the reference tasks, closed loop (PID + ADRC), test model."""
    rows: list[FaultRow] = []
    for name, (profile, timeout) in WORLD_FAULTS.items():
        path = root / f"{name}.json"
        path.write_text(profile.model_dump_json())
        config = FaultsConfig(
            profiles=(str(path),),
            strategies=("closedloop_adrc",),
            steps=(1, 3, 5),
            episodes=episodes,
            latency_scale=1.0 if name == "timeouts" else 0.0,
            cache=False,
            tool_timeout_s=timeout,
            backoff_s=0.0,
            concurrency=8,
        )
        runner = make_runner(config)
        results = await run_jobs(config, plan_jobs(config, list(runner.tasks.values())), runner)
        handed = sum(r.handed_over for r in results)
        done = sum(r.success for r in results)
        rows.append(
            FaultRow(
                fault=name,
                tasks=len(results),
                completed=done,
                handed_over=handed,
                failed=len(results) - done - handed,
                duplicated_effects=sum(r.duplicate_effects for r in results),
                state_lost=None,
                typed_errors=sum(r.error is not None for r in results),
                note="reference tasks, steps 1/3/5, world counters for duplicates",
                errors=tuple(sorted({r.error[:200] for r in results if r.error})[:3]),
            )
        )
    return rows


# --- the model server dies mid-call ----------------------------------------------------------

_MODEL_SERVER = textwrap.dedent(
    """
    import sys, time, uvicorn
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def chat(request):
        await request.body()
        print("IN-CALL", flush=True)
        time.sleep(60)  # blocks the process: it is killed while the client waits
        return JSONResponse({})

    app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="critical")
    """
)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _wait_port(port: int, proc: subprocess.Popen[bytes], seconds: float = 20.0) -> None:
    for _ in range(int(seconds / 0.05)):
        if proc.poll() is not None:
            raise RuntimeError("the server exited at start")
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.05)
            continue
        writer.close()
        await writer.wait_closed()
        return
    raise RuntimeError(f"nothing listens on port {port}")


async def model_server_row(root: Path, tasks: int) -> FaultRow:
    """A real OpenAI-compatible HTTP server on loopback, SIGKILLed while a call waits."""
    script = root / "model_server.py"
    script.write_text(_MODEL_SERVER)
    typed = handed = done = lost = 0
    store_path = root / "model-server.db"
    store = SQLiteStore(store_path)
    committed: dict[str, int] = {}
    try:
        for n in range(tasks):
            port = _free_port()
            proc = subprocess.Popen(
                [sys.executable, str(script), str(port)],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
            try:
                await _wait_port(port, proc)
                model = OpenAICompatible(f"http://127.0.0.1:{port}/v1", "dying", timeout=30.0)
                agent = Agent(
                    model,
                    _tools(_Effects(), lambda: "m"),
                    runtime=Runtime(store=store, trace=False),
                )
                run = asyncio.ensure_future(agent.run(Task(prompt=f"Add {n} and 1.")))
                assert proc.stdout is not None
                line = await asyncio.to_thread(proc.stdout.readline)
                if line.strip() != b"IN-CALL":  # proof the call is in flight when it dies
                    raise RuntimeError(f"the model server never got the call: {line!r}")
                proc.send_signal(signal.SIGKILL)
                try:
                    result = await run
                except ClosedLoopError:
                    typed += 1
                else:
                    done += result.halt_reason is HaltReason.FINAL
                    handed += result.halt_reason is HaltReason.HANDOVER
                    typed += result.halt_reason is HaltReason.ERROR
            finally:
                if proc.poll() is None:
                    proc.kill()
                proc.wait()
            audit = audit_sqlite(store_path, committed_before=committed)
            committed = audit.committed
            lost += len(audit.problems)
    finally:
        await store.close()
    return FaultRow(
        fault="model_server_killed",
        tasks=tasks,
        completed=done,
        handed_over=handed,
        failed=tasks - done - handed,
        duplicated_effects=0,
        state_lost=lost,
        typed_errors=typed,
        note="OpenAICompatible against a loopback server SIGKILLed mid-request",
    )


# --- disk full and Redis down: a store that fails under a running task ----------------------


async def _run_until_store_fails(
    store: StateStore, effects: _Effects, tasks: int, fail: Callable[[int], Awaitable[None]]
) -> tuple[int, int, int]:
    """Run paying tasks (confirmed through the ledger); ``fail(n)`` breaks the store."""
    done = typed = handed = 0
    for n in range(tasks):
        await fail(n)
        script = [
            {"tool": "place_order", "arguments": {"order_id": n + 1}},
            {"tool": "add", "arguments": {"a": n, "b": 1}},
            {"final": str(n + 1), "fields": {"total": n + 1}},
        ]
        tools = _tools(effects, functools.partial(str, f"t{n}"))
        agent = Agent(ScriptedModel(script), tools, runtime=Runtime(store=store, trace=False))
        try:
            result = await agent.run(Task(prompt=f"Ship order {n + 1}", required_fields=["total"]))
        except StoreUnavailableError:  # the task could not even be created
            typed += 1
            continue
        except ClosedLoopError:
            typed += 1
            continue
        # A store failing inside the run ends it as error, the exception in the result.
        typed += result.halt_reason is HaltReason.ERROR and _typed_error(result.error)
        done += result.success
        handed += result.halt_reason is HaltReason.HANDOVER
    return done, typed, handed


async def disk_full_row(root: Path, tasks: int) -> FaultRow:
    """SQLite's ``max_page_count`` pinned at the file's size half-way: the disk is full."""
    path = root / "disk-full.db"
    store = SQLiteStore(path)
    effects = _Effects()
    committed: dict[str, int] = {}

    async def fail(n: int) -> None:
        nonlocal committed
        if n == tasks // 2:
            committed = audit_sqlite(path).committed

            def pin(conn: Any) -> None:
                pages = int(conn.execute("PRAGMA page_count").fetchone()[0])
                conn.execute(f"PRAGMA max_page_count={pages}")

            # The store's writing connection, on its worker thread (reads run on connections
            # of their own): a full disk for its writes alone.
            await store._call(pin, write=True)

    try:
        done, typed, handed = await _run_until_store_fails(store, effects, tasks, fail)
    finally:
        await store.close()
    audit = audit_sqlite(path, committed_before=committed)
    duplicated = sum(c - 1 for c in effects.shipped.values() if c > 1) + audit.duplicated_effects
    return FaultRow(
        fault="disk_full_sqlite",
        tasks=tasks,
        completed=done,
        handed_over=handed,
        failed=tasks - done - handed,
        duplicated_effects=duplicated,
        state_lost=len([p for p in audit.problems if "lost" in p or "vanished" in p]),
        typed_errors=typed,
        note="PRAGMA max_page_count pinned half-way; writes then raise StoreUnavailableError",
    )


async def redis_row(root: Path, tasks: int) -> FaultRow | None:
    """A real redis-server (appendfsync always) SIGKILLed half-way, then restarted."""
    binary = shutil.which("redis-server") or "/usr/bin/redis-server"
    try:
        from closedloop.feedback import RedisStore
    except ImportError:
        return None
    if not os.path.exists(binary):
        return None
    port = _free_port()
    data = root / "redis"
    data.mkdir(exist_ok=True)
    argv = [
        binary,
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--dir",
        str(data),
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
        "--save",
        "",
    ]
    procs: list[subprocess.Popen[bytes]] = []

    def start() -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(proc)
        return proc

    await _wait_port(port, start())
    store: StateStore = RedisStore(f"redis://127.0.0.1:{port}/0", socket_timeout_s=1.0)
    effects = _Effects()
    committed: set[str] = set()

    async def ledger_keys() -> set[str]:
        return {
            r.key for r in await store.record_list("ledger") if r.value.get("status") == "committed"
        }

    async def fail(n: int) -> None:
        nonlocal committed
        if n == tasks // 2:
            committed = await ledger_keys()
            procs[-1].send_signal(signal.SIGKILL)
            procs[-1].wait()
        if n == tasks // 2 + 2:
            await _wait_port(port, start())

    try:
        done, typed, handed = await _run_until_store_fails(store, effects, tasks, fail)
        if procs[-1].poll() is not None:
            # Fewer than four tasks end before the scheduled restart: restart now, so the
            # audit reads the append-only file and never a server that is still down.
            await _wait_port(port, start())
        lost = len(committed - await ledger_keys())
    finally:
        await store.close()
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    duplicated = sum(c - 1 for c in effects.shipped.values() if c > 1)
    return FaultRow(
        fault="redis_down",
        tasks=tasks,
        completed=done,
        handed_over=handed,
        failed=tasks - done - handed,
        duplicated_effects=duplicated,
        state_lost=lost,
        typed_errors=typed,
        note="redis-server SIGKILLed for two tasks, then restarted on its append-only file",
    )


def crash_resume_row(repo: Path) -> FaultRow | None:
    """SIGKILL of the agent's process at each point of a step (the crash-resume tests)."""
    test = repo / "tests" / "agent" / "test_crash_resume.py"
    if not test.exists():
        return None
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test), "-k", "killed"],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    summary = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else out.stderr[-200:]
    passed = _count(summary, "passed")
    failed = _count(summary, "failed") + _count(summary, "error")
    return FaultRow(
        fault="sigkill_mid_step",
        tasks=passed + failed,
        completed=passed,
        handed_over=0,
        failed=failed,
        duplicated_effects=0 if failed == 0 else -1,
        state_lost=0 if failed == 0 else -1,
        note=f"tests/agent/test_crash_resume.py (each kill point, SQLite and Redis): {summary}",
    )


def _count(summary: str, word: str) -> int:
    parts = summary.replace(",", " ").split()
    for index, part in enumerate(parts[1:], start=1):
        if part.startswith(word) and parts[index - 1].isdigit():
            return int(parts[index - 1])
    return 0


async def run_fault_matrix(
    root: Path, *, episodes: int, tasks: int, repo: Path | None
) -> list[FaultRow]:
    """Every row of the matrix that this machine can run."""
    rows = await world_rows(root, episodes)
    rows.append(await model_server_row(root, max(2, tasks // 4)))
    rows.append(await disk_full_row(root, tasks))
    redis = await redis_row(root, tasks)
    if redis is not None:
        rows.append(redis)
    if repo is not None:
        crash = await asyncio.to_thread(crash_resume_row, repo)
        if crash is not None:
            rows.append(crash)
    return rows


def rows_json(rows: list[FaultRow]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = json.loads(json.dumps([r.as_dict() for r in rows]))
    return out
