"""Chaos and soak: SIGKILL workers of a Redis deployment; writes bench/results/chaos.json.

Usage: python bench/chaos.py [--minutes 15] [--workers 2] [--redis redis://HOST:PORT/DB]
Without --redis a redis-server (it must be on PATH) is started on a free loopback port in a
scratch directory and stopped at the end. A worker executing a run is killed every 30-60 s
(random intervals that --seed picks); its runs are taken over through the run queue. The
report counts runs submitted, completed and taken over, time to takeover (p50 / p95),
duplicated and lost effects (both must be 0) and lost runs (must be 0).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from closedloop_bench.benchmarks._chaos import ChaosPlan, chaos_row, run_chaos

ROOT = Path(__file__).resolve().parent.parent


@contextlib.contextmanager
def _redis(directory: Path) -> Iterator[str]:
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server is not on PATH: install it or pass --redis URL")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    command = [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(directory)]
    command += ["--save", "", "--appendonly", "yes", "--appendfsync", "everysec"]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port)):
                break
            time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        server.terminate()
        server.wait(timeout=15)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=15.0, help="how long the chaos lasts")
    parser.add_argument("--workers", type=int, default=2, help="worker processes (2 or 3)")
    parser.add_argument("--redis", default=None, help="an existing Redis (default: start one)")
    parser.add_argument("--takeover-after", type=float, default=15.0, help="seconds")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--concurrent-repeats",
        action="store_true",
        help="let a run repeat a key while the first run with it still executes",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "chaos.json")
    args = parser.parse_args()
    duration_s = args.minutes * 60.0
    rng = random.Random(args.seed)
    kills, at = [], rng.uniform(30.0, 60.0)
    while at < duration_s - 30.0:  # the last kill leaves time for its takeover
        kills.append(round(at, 1))
        at += rng.uniform(30.0, 60.0)
    plan = ChaosPlan(
        duration_s=duration_s,
        kills_at_s=kills,
        workers=args.workers,
        takeover_after_s=args.takeover_after,
        bound_s=max(120.0, 4 * args.takeover_after),
        seed=args.seed,
        concurrent_repeats=args.concurrent_repeats,
    )
    with tempfile.TemporaryDirectory(prefix="closedloop-chaos-") as scratch:
        work = Path(scratch)
        with contextlib.ExitStack() as stack:
            url = args.redis or stack.enter_context(_redis(work))
            report = run_chaos(url, work, plan)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    keys = ("runs_submitted", "runs_completed", "runs_taken_over", "duplicated_effects")
    print({k: report[k] for k in (*keys, "lost_effects", "lost_runs", "time_to_takeover_s")})
    print(chaos_row(report))
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
