"""Load on loopback: many concurrent sessions, each answer checked against its own task.

    .venv/bin/python bench/service_load.py [--sessions 1000] [--keys 10] [--small]
                                           [--out bench/results/service_load.json]

A `closedloop` service runs in a subprocess on 127.0.0.1 (SQLite store in a temporary
directory, a zero-latency deterministic model, the rate limit lifted). The client opens
every session, starts one run in each (``Add A and B.`` with numbers unique to the
session) so that all runs are in flight together, waits for them, and checks each
answer and each trace against its own task: a wrong sum, another session's numbers, or
a run listed under another key counts as a leak. Reported: control overhead per step
(the run's wall time minus its model time, over its steps; p50 / p99), end-to-end
latency per session, throughput and the server's RSS. Bounded in count and time: the
whole run is cut off after ``--timeout-s``. Exit status 1 when anything was wrong.

Then the arrival-rate sweep (``service_rates.py``): open-loop Poisson arrivals at rising
rates, one short window each, reporting the highest steady rate at which the p99 control
overhead per step stays under 200 ms. ``--quick`` runs only a short sweep (under two
minutes) and merges it into the ``--out`` file, keeping the load figures already there;
``--small`` (CI) and ``--no-sweep`` skip it.

    .venv/bin/python bench/service_load.py --quick
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from closedloop import RunLimits, Runtime
from closedloop.agent import stop_on_no_progress, stop_on_repeats
from closedloop.models import CallInfo, ModelBase, RawCompletion
from closedloop.perception import Observation

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "bench" / "results" / "service_load.json"
TASK = re.compile(r"Add (-?\d+) and (-?\d+)")


# --- the server side (``--serve``) ---------------------------------------------------------


def _calc_reply(messages: Any, info: Any) -> dict[str, Any]:
    text = messages[-1].content
    seen = re.search(r"^value: (-?\d+)$", text, re.MULTILINE)
    if seen:
        return {"final": seen.group(1)}
    match = TASK.search(text)
    if match is None:
        return {"final": "no numbers in the task"}
    return {"tool": "add", "arguments": {"a": int(match.group(1)), "b": int(match.group(2))}}


def _sensor_reply(messages: Any, info: Any) -> dict[str, Any]:
    match = re.search(r"step (\d+) of", messages[-1].content)
    step = int(match.group(1)) if match else 99
    return {"tool": "probe", "arguments": {"sample": step - 1}} if step <= 8 else {"final": "ok"}


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


CONFIDENCE = (0.95, 0.9, 0.8, 0.6, 0.4, 0.2, 0.1, 0.05)


def probe(sample: int) -> Observation:
    """Read one sample of the sensor (its confidence falls: the task is handed over)."""
    value = {"sample": sample}
    return Observation.ok(value, source="probe", confidence=CONFIDENCE[min(max(sample, 0), 7)])


class BenchModel(ModelBase):
    """A zero-latency deterministic model that keeps nothing between calls.

    (``FunctionModel`` records every call for tests to inspect; over a soak of thousands
    of runs that record alone would look like a leak of the service.)
    """

    def __init__(self) -> None:
        super().__init__("bench-deterministic")

    async def _complete(self, call: CallInfo) -> RawCompletion:
        if "- probe:" in call.messages[0].content:
            answer = _sensor_reply(call.messages, call)
        else:
            answer = _calc_reply(call.messages, call)
        text = json.dumps(answer)
        prompt = sum(len(m.content) for m in call.messages) // 4
        return RawCompletion(text=text, prompt_tokens=prompt, completion_tokens=len(text) // 4)


def serve(port_file: Path, db: Path, runs_dir: Path, synchronous: str) -> None:
    """Run the service for the benchmark (the client starts this in a subprocess)."""
    import uvicorn

    from closedloop.agent import Agent, ControlConfig
    from closedloop.server import AgentRegistry, RateLimit, ServerSettings, create_app

    sensor_control = ControlConfig(
        eso_min_samples=3, protocol_thresholds=(0.3, 0.5, 0.7), hysteresis=0.0
    )
    registry = AgentRegistry()
    registry.register("calc", lambda ctx: Agent(ctx.model, [add], runtime=Runtime(store=ctx.store)))
    registry.register(
        "sensor",
        lambda ctx: Agent(
            ctx.model,
            [probe],
            control=sensor_control,
            runtime=Runtime(store=ctx.store),
            limits=RunLimits(stop=stop_on_no_progress(20) | stop_on_repeats(2)),
        ),
    )
    settings = ServerSettings(
        store=f"sqlite://{db}?synchronous={synchronous}",
        model=BenchModel(),
        registry=registry,
        runs_dir=runs_dir,
        rate_limit=RateLimit(rate_per_s=1e6, burst=1_000_000),
        gc_interval_s=30.0,
    )
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(4096)
    port_file.write_text(str(sock.getsockname()[1]))
    # Idle pooled connections must not be closed under the client while it waits for the
    # runs (uvicorn's default keep-alive is 5 s): that race reads as a dropped request.
    config = uvicorn.Config(
        create_app(settings), log_level="warning", backlog=4096, timeout_keep_alive=300
    )
    with contextlib.suppress(KeyboardInterrupt):
        uvicorn.Server(config).run(sockets=[sock])


# --- the client side -----------------------------------------------------------------------


def rss_mb(pid: int) -> float:
    """Resident set size of a process, from /proc (Linux)."""
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds a process has used, from /proc (Linux)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def make_keys(db: Path, count: int) -> list[str]:
    from closedloop.feedback import SQLiteStore
    from closedloop.server import ApiKeys

    async def create() -> list[str]:
        store = SQLiteStore(db)
        try:
            keys = ApiKeys(store)
            return [(await keys.create(f"bench-{i}")).token for i in range(count)]
        finally:
            await store.close()

    return asyncio.run(create())


@dataclass
class Server:
    """The service subprocess and where it listens."""

    proc: subprocess.Popen[bytes]
    base_url: str
    workdir: Path
    keys: list[str] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.proc.pid


@contextlib.contextmanager
def running_server(keys: int, *, synchronous: str = "FULL", startup_s: float = 60.0) -> Any:
    """Start the service subprocess with ``keys`` keys; stop it (SIGINT, then kill)."""
    with tempfile.TemporaryDirectory(prefix="closedloop-bench-") as tmp:
        workdir = Path(tmp)
        db, port_file = workdir / "state.db", workdir / "port"
        tokens = make_keys(db, keys)
        env = {**os.environ, "CLOSEDLOOP_HOME": str(workdir / "home")}
        command = [sys.executable, str(Path(__file__).resolve()), "--serve", str(port_file),
                   str(db), str(workdir / "runs"), synchronous]  # fmt: skip
        proc = subprocess.Popen(command, env=env)
        try:
            deadline = time.monotonic() + startup_s
            while not port_file.exists() or not port_file.read_text():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the benchmark server did not start")
                time.sleep(0.05)
            base_url = f"http://127.0.0.1:{port_file.read_text()}"
            while True:
                try:
                    httpx.get(f"{base_url}/healthz", timeout=5).raise_for_status()
                    break
                except httpx.HTTPError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
            yield Server(proc, base_url, workdir, tokens)
        finally:
            proc.send_signal(2)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


def percentile(values: list[float], q: float) -> float:
    """The q-quantile (0..1) by linear interpolation; NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    position = (len(ordered) - 1) * q
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def summary(values: list[float], scale: float = 1.0) -> dict[str, float]:
    scaled = [v * scale for v in values]
    return {
        "p50": round(percentile(scaled, 0.50), 4),
        "p99": round(percentile(scaled, 0.99), 4),
        "mean": round(statistics.fmean(scaled), 4) if scaled else float("nan"),
        "max": round(max(scaled), 4) if scaled else float("nan"),
    }


@dataclass
class Session:
    """One session of the load: its key, its numbers, and what came back."""

    index: int
    key: str
    a: int
    b: int
    session_id: str = ""
    run_id: str = ""
    started: float = 0.0
    ended: float = 0.0
    run: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


@contextlib.asynccontextmanager
async def clients(server: Server, concurrency: int) -> AsyncIterator[dict[str, httpx.AsyncClient]]:
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    made = {
        key: httpx.AsyncClient(
            base_url=server.base_url,
            headers={"Authorization": f"Bearer {key}"},
            limits=limits,
            timeout=httpx.Timeout(120.0),
        )
        for key in server.keys
    }
    try:
        yield made
    finally:
        for client in made.values():
            await client.aclose()


async def _start(session: Session, client: httpx.AsyncClient, gate: asyncio.Semaphore) -> None:
    async with gate:
        session.started = time.perf_counter()
        created = await client.post("/v1/sessions", json={"metadata": {"i": session.index}})
        created.raise_for_status()
        session.session_id = created.json()["id"]
        task = f"Add {session.a} and {session.b}."
        started = await client.post(
            f"/v1/sessions/{session.session_id}/runs", json={"agent": "calc", "task": task}
        )
        started.raise_for_status()
        session.run_id = started.json()["id"]


async def _wait_all(server: Server, by_key: dict[str, httpx.AsyncClient], poll_s: float) -> None:
    pending = set(by_key)
    while pending:
        for key in list(pending):
            params = {"status": "running", "limit": 1}
            running = await get_json(by_key[key], "/v1/runs", params=params)
            if not running["runs"]:
                pending.discard(key)
        if pending:
            await asyncio.sleep(poll_s)


async def get_json(client: httpx.AsyncClient, path: str, **kw: Any) -> Any:
    """GET with one retry on a dropped connection (GETs are safe to repeat)."""
    try:
        response = await client.get(path, **kw)
    except httpx.TransportError:
        response = await client.get(path, **kw)
    response.raise_for_status()
    return response.json()


async def _check(session: Session, client: httpx.AsyncClient, gate: asyncio.Semaphore) -> None:
    async with gate:
        base = f"/v1/sessions/{session.session_id}/runs/{session.run_id}"
        run = await get_json(client, base)
        session.ended = time.perf_counter()
        session.run = run
        expected = str(session.a + session.b)
        if run.get("status") != "done" or not run.get("success"):
            session.problems.append(f"status {run.get('status')} / {run.get('halt_reason')}")
        if run.get("answer") != expected:
            session.problems.append(f"answer {run.get('answer')!r} != {expected!r}")
        if run.get("task") != f"Add {session.a} and {session.b}.":
            session.problems.append("the run holds another task")
        trace = (await get_json(client, f"{base}/trace"))["steps"]
        calls = [s["action"]["arguments"] for s in trace if s.get("action")]
        if calls != [{"a": session.a, "b": session.b}]:
            session.problems.append(f"tool calls {calls} are not this session's")


def _overheads(sessions: list[Session]) -> tuple[list[float], list[float], int]:
    overhead, model, steps = [], [], 0
    for s in sessions:
        timing, n = s.run.get("timing") or {}, int(s.run.get("steps") or 0)
        if n:
            steps += n
            overhead.append((timing["wall_s"] - timing["model_s"]) / n)
            model.append(timing["model_s"] / n)
    return overhead, model, steps


async def alone(server: Server, count: int) -> dict[str, float]:
    """Control overhead per step of runs made one at a time (nothing to queue behind)."""
    jobs = [Session(-1 - i, server.keys[0], 7 + i, 11 * i) for i in range(count)]
    gate = asyncio.Semaphore(1)
    async with clients(server, 4) as by_key:
        client = by_key[server.keys[0]]
        for job in jobs:
            await _start(job, client, gate)
            run: dict[str, Any] = {}
            while run.get("status") in (None, "running"):
                await asyncio.sleep(0.01)
                run = (await client.get(f"/v1/sessions/{job.session_id}/runs/{job.run_id}")).json()
            job.run = run
            await client.delete(f"/v1/sessions/{job.session_id}")
    overhead, _, _ = _overheads(jobs)
    return summary(overhead, 1000.0)


async def load(server: Server, sessions: int, concurrency: int, poll_s: float) -> dict[str, Any]:
    """Run the load against ``server``; every figure of the report but the RSS."""
    jobs = [
        # a is the session's own index, b a large offset: every sum is unique, so any
        # answer that crossed from one session to another shows as wrong.
        Session(i, server.keys[i % len(server.keys)], i, 1_000_003 + 7 * i)
        for i in range(sessions)
    ]
    gate = asyncio.Semaphore(concurrency)
    async with clients(server, concurrency) as by_key:
        t0 = time.perf_counter()
        await asyncio.gather(*(_start(s, by_key[s.key], gate) for s in jobs))
        started_s = time.perf_counter() - t0
        await _wait_all(server, by_key, poll_s)
        done_s = time.perf_counter() - t0
        await asyncio.gather(*(_check(s, by_key[s.key], gate) for s in jobs))
        leaks = 0
        for key, client in by_key.items():
            listed = (await get_json(client, "/v1/runs", params={"limit": 1000}))["runs"]
            mine = {s.run_id for s in jobs if s.key == key}
            leaks += len({r["id"] for r in listed} - mine)
            if len(listed) != len(mine):
                leaks += abs(len(mine) - len(listed))
    overhead, model, steps = _overheads(jobs)
    e2e = [s.ended - s.started for s in jobs]
    wrong = [s for s in jobs if s.problems]
    return {
        "sessions": sessions,
        "keys": len(server.keys),
        "client_concurrency": concurrency,
        "ok": sessions - len(wrong),
        "wrong": len(wrong),
        "leaks": leaks,
        "examples_of_problems": [f"session {s.index}: {'; '.join(s.problems)}" for s in wrong[:5]],
        "steps": steps,
        "all_started_s": round(started_s, 3),
        "all_done_s": round(done_s, 3),
        "throughput_runs_per_s": round(sessions / done_s, 1) if done_s else None,
        "control_overhead_ms_per_step": summary(overhead, 1000.0),
        "model_ms_per_step": summary(model, 1000.0),
        "end_to_end_s_per_session": summary(e2e),
        "note": (
            "control overhead = the run's wall time in the server minus its model time, "
            "per step, while all runs share one event loop, one SQLite writer and 2 cores: "
            "it includes queueing behind the other sessions"
        ),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--keys", type=int, default=10)
    parser.add_argument("--concurrency", type=int, default=256, help="HTTP requests in flight")
    parser.add_argument("--poll-s", type=float, default=0.25)
    parser.add_argument("--timeout-s", type=float, default=600.0)
    parser.add_argument("--small", action="store_true", help="50 sessions, 5 keys (CI)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument(
        "--synchronous",
        choices=("FULL", "NORMAL"),
        default="FULL",
        help="SQLite durability (FULL: fsync per commit, the default of the store)",
    )
    parser.add_argument("--alone", type=int, default=20, help="runs made one at a time first")
    parser.add_argument(
        "--quick", action="store_true", help="only a short arrival-rate sweep, merged into --out"
    )
    parser.add_argument("--no-sweep", action="store_true", help="no arrival-rate sweep")
    parser.add_argument("--serve", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve(Path(args.serve[0]), Path(args.serve[1]), Path(args.serve[2]), args.serve[3])
        return 0
    from service_rates import quick_sweep, run_sweep

    if args.quick:
        return quick_sweep(args.out, args.keys, args.synchronous, args.timeout_s)
    if args.small:
        args.sessions, args.keys = 50, 5
    with running_server(args.keys, synchronous=args.synchronous) as server:
        unloaded = asyncio.run(asyncio.wait_for(alone(server, args.alone), args.timeout_s))
        rss_before, cpu_before = rss_mb(server.pid), cpu_s(server.pid)
        t0 = time.perf_counter()
        report = asyncio.run(
            asyncio.wait_for(
                load(server, args.sessions, args.concurrency, args.poll_s), args.timeout_s
            )
        )
        report["wall_s"] = round(time.perf_counter() - t0, 3)
        cpu = cpu_s(server.pid) - cpu_before
        # Every request of the load (sessions, runs, polls, checks) is in this figure too.
        report["server_cpu_ms_per_step"] = round(cpu / max(1, report["steps"]) * 1000, 3)
        report["control_overhead_ms_per_step_alone"] = unloaded
        report["sqlite_synchronous"] = args.synchronous
        report["server_rss_mb"] = {
            "before": round(rss_before, 1),
            "after": round(rss_mb(server.pid), 1),
        }
        if not (args.small or args.no_sweep):
            report["arrival_rate_sweep"] = run_sweep(
                server, quick=False, timeout_s=args.timeout_s, synchronous=args.synchronous
            )
    report["machine"] = {"python": platform.python_version(), "cpus": os.cpu_count()}
    text = json.dumps(report, indent=2)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n")
    print(text)
    return 0 if report["wrong"] == 0 and report["leaks"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
