"""State store throughput: MemoryStore, SQLiteStore and RedisStore on the same operations.

    .venv/bin/python bench/store_throughput.py           # writes bench/results/store_throughput.json
    .venv/bin/python bench/store_throughput.py --quick   # fewer operations, to see it work

Starts its own redis-server (Debian package, ``scripts/install_system_deps.sh``) on a free
loopback port in a temporary directory, once with ``appendfsync always`` (every
acknowledged write is on disk, what the ledger needs across a Redis crash) and once with
``everysec``. Every store runs the same four workloads:

- ``put``: one client, sequential compare-and-set puts on one session;
- ``update x C``: C concurrent clients, each read-modify-CAS on its own session;
- ``contended x C``: C concurrent clients updating one session (CAS retries counted);
- ``claim``: one client, ``record_put(expected_version=0)`` on fresh keys (ledger claims);
- ``get``: one client, point reads of one record (``record_get``).

Each workload also reports the process CPU time per operation (every thread: SQLite's
worker, redis-py's), and SQLite FULL runs a second time with its reads on the worker
thread (``inline_reads=False``), the way every read went before reads ran inline.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from closedloop.feedback import MemoryStore, RedisStore, Snapshot, SQLiteStore
from closedloop.feedback._store import BaseStore

REDIS_SERVER = "/usr/bin/redis-server"


@contextmanager
def redis_server(directory: Path, fsync: str) -> Iterator[str]:
    """A throwaway redis-server; yields its URL."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    proc = subprocess.Popen(
        [
            REDIS_SERVER,
            "--port", str(port), "--bind", "127.0.0.1", "--dir", str(directory),
            "--save", "", "--appendonly", "yes", "--appendfsync", fsync,
            "--daemonize", "no", "--logfile", str(directory / "redis.log"),
        ],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as conn:
                    conn.sendall(b"PING\r\n")
                    if conn.recv(16).startswith(b"+PONG"):
                        break
            except OSError:
                pass
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError(f"redis-server did not start on port {port}")
            time.sleep(0.02)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(timeout=15)


def _bump(snap: Snapshot) -> dict[str, Any]:
    return {"n": snap.data["n"] + 1, "pad": snap.data["pad"]}  # type: ignore[operator]


async def _timed(lanes: list[list[Callable[[], Awaitable[Any]]]]) -> dict[str, float]:
    """Run each lane's calls in order, the lanes concurrently (one client per lane)."""
    latencies: list[float] = []

    async def worker(calls: list[Callable[[], Awaitable[Any]]]) -> None:
        for call in calls:
            start = time.perf_counter()
            await call()
            latencies.append(time.perf_counter() - start)

    start, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(worker(lane) for lane in lanes))
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    ordered = sorted(latencies)
    return {
        "ops": len(latencies),
        "ops_per_s": round(len(latencies) / elapsed, 1),
        "cpu_us_per_op": round(cpu / len(latencies) * 1e6, 1),
        "p50_ms": round(statistics.median(ordered) * 1000, 3),
        "p95_ms": round(ordered[int(0.95 * (len(ordered) - 1))] * 1000, 3),
    }


async def run_store(store: BaseStore, ops: int, clients: int) -> dict[str, Any]:
    """The four workloads on one store; returns ``{workload: numbers}``."""
    pad = "x" * 200  # a small but not empty document
    results: dict[str, Any] = {}
    await store.create("seq", {"n": 0, "pad": pad})
    version = [1]

    async def put() -> None:
        snap = await store.put("seq", {"n": version[0], "pad": pad}, expected_version=version[0])
        version[0] = snap.version

    results["put"] = await _timed([[put] * ops])

    for c in range(clients):
        await store.create(f"own-{c}", {"n": 0, "pad": pad})
    own = [
        [lambda c=c: store.update(f"own-{c}", _bump, max_attempts=10_000)] * (ops // clients)
        for c in range(clients)
    ]
    results[f"update x {clients}"] = await _timed(own)

    await store.create("hot", {"n": 0, "pad": pad})
    retries_before = store.stats.cas_retries
    per_client = ops // 2 // clients
    hot = [[lambda: store.update("hot", _bump, max_attempts=10_000)] * per_client] * clients
    contended = await _timed(hot)
    final = await store.get("hot")
    assert final.data["n"] == per_client * clients, (
        "lost update"
    )  # the benchmark doubles as a check
    contended["cas_retries"] = store.stats.cas_retries - retries_before
    results[f"contended x {clients}"] = contended

    keys = iter(range(ops))
    results["claim"] = await _timed(
        [
            [
                lambda: store.record_put(
                    "ledger", f"k{next(keys)}", {"s": "pending"}, expected_version=0
                )
            ]
            * ops
        ]
    )
    results["get"] = await _timed([[lambda: store.record_get("ledger", "k0")] * ops])
    return results


async def run_all(ops: int, clients: int) -> dict[str, Any]:
    """Every store; returns the report."""
    report: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        builders: list[tuple[str, Callable[[], BaseStore]]] = [
            ("memory", MemoryStore),
            ("sqlite FULL", lambda: SQLiteStore(root / "full.db")),
            (
                "sqlite FULL, reads on the worker",
                lambda: SQLiteStore(root / "worker.db", inline_reads=False),
            ),
            ("sqlite NORMAL", lambda: SQLiteStore(root / "normal.db", synchronous="NORMAL")),
        ]
        for name, build in builders:
            async with build() as store:
                report[name] = await run_store(store, ops, clients)
            print(f"  {name}: done", flush=True)
        if shutil.which(REDIS_SERVER) is None:
            report["redis"] = "skipped: /usr/bin/redis-server missing"
            return report
        for fsync in ("always", "everysec"):
            directory = root / f"redis-{fsync}"
            directory.mkdir()
            with redis_server(directory, fsync) as url:
                async with RedisStore(url) as store:
                    report[f"redis appendfsync={fsync}"] = await run_store(store, ops, clients)
            print(f"  redis appendfsync={fsync}: done", flush=True)
    return report


def render(report: dict[str, Any]) -> str:
    """The report as a fixed-width table: ops/s (p50 ms) per store and workload."""
    stores = [name for name, value in report.items() if isinstance(value, dict)]
    workloads = list(report[stores[0]])
    head = f"{'store':<24}" + "".join(f"{w:>24}" for w in workloads)
    lines = [head, "-" * len(head)]
    for name in stores:
        cells = []
        for w in workloads:
            r = report[name][w]
            cells.append(f"{r['ops_per_s']:>10.0f}/s ({r['p50_ms']:.2f} ms)")
        lines.append(f"{name:<24}" + "".join(f"{c:>24}" for c in cells))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, write the JSON and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="300 operations per workload")
    parser.add_argument("--ops", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--out", type=Path, default=Path("bench/results/store_throughput.json"))
    args = parser.parse_args(argv)
    ops = 300 if args.quick else args.ops
    stores = asyncio.run(run_all(ops, args.clients))
    report = {
        "ops_per_workload": ops,
        "clients": args.clients,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "stores": stores,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(render(stores))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
