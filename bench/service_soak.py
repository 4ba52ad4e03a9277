"""Soak on loopback: steady traffic for minutes, the server's memory sampled, flat or not.

    .venv/bin/python bench/service_soak.py [--duration-s 600] [--workers 8] [--small]
                                           [--out bench/results/service_soak.json]

The same service subprocess as ``service_load.py``. Each client worker loops until the
deadline: open a session, run ``Add A and B.`` and check the answer, every
``--handover-every``-th time also run the sensor agent, which freezes for a person, and
approve its handover so the task finishes; then delete the session. The server's RSS
(from /proc) is sampled every ``--sample-s``. After ``--warmup-s`` the memory must stay
flat: the median of the last tenth of the samples within 10 % of the median of the first
tenth. Exit status 1 when it is not flat or any iteration went wrong.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from service_load import Server, rss_mb, running_server

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "bench" / "results" / "service_soak.json"


class Tally:
    """What the workers did."""

    def __init__(self) -> None:
        self.iterations = 0
        self.runs = 0
        self.handovers = 0
        self.problems: list[str] = []


async def _wait(client: httpx.AsyncClient, path: str, poll_s: float) -> dict[str, Any]:
    while True:
        run: dict[str, Any] = (await client.get(path)).json()
        if run.get("status") != "running":
            return run
        await asyncio.sleep(poll_s)


async def _worker(
    index: int, client: httpx.AsyncClient, deadline: float, every: int, tally: Tally
) -> None:
    n = 0
    while time.monotonic() < deadline:
        n += 1
        a, b = index * 1_000_000 + n, 17 * n
        try:
            sid = (await client.post("/v1/sessions", json={})).json()["id"]
            base = f"/v1/sessions/{sid}/runs"
            rid = (
                await client.post(base, json={"agent": "calc", "task": f"Add {a} and {b}."})
            ).json()["id"]
            run = await _wait(client, f"{base}/{rid}", 0.02)
            tally.runs += 1
            if run.get("answer") != str(a + b):
                tally.problems.append(f"worker {index} #{n}: {run.get('answer')!r} != {a + b}")
            if every and n % every == 0:
                started = await client.post(base, json={"agent": "sensor", "task": "Read."})
                if started.status_code != 202:
                    raise ValueError(f"sensor run refused: {started.text[:300]}")
                rid = started.json()["id"]
                frozen = await _wait(client, f"{base}/{rid}", 0.02)
                # The key's PID history warm-starts later runs, so the estimator may see
                # less disturbance and the task may finish without a person: both are fine.
                if frozen.get("status") == "handover":
                    await client.post(f"/v1/handovers/{frozen['handover_id']}/approve", json={})
                    done = await _wait(client, f"{base}/{rid}", 0.02)
                    tally.handovers += 1
                    if not done.get("success"):
                        tally.problems.append(f"worker {index} #{n}: resumed run failed")
                elif frozen.get("status") != "done":
                    tally.problems.append(f"worker {index} #{n}: sensor {frozen.get('status')}")
                tally.runs += 1
            deleted = await client.delete(f"/v1/sessions/{sid}")
            if deleted.status_code != 204:
                tally.problems.append(f"worker {index} #{n}: delete {deleted.status_code}")
            tally.iterations += 1
        except (httpx.HTTPError, KeyError, ValueError) as exc:
            tally.problems.append(f"worker {index} #{n}: {type(exc).__name__}: {exc}")


async def _sample(
    pid: int, every_s: float, deadline: float, out: list[tuple[float, float]]
) -> None:
    start = time.monotonic()
    while time.monotonic() < deadline:
        out.append((round(time.monotonic() - start, 2), round(rss_mb(pid), 2)))
        await asyncio.sleep(every_s)


def _slope_mb_per_min(samples: list[tuple[float, float]]) -> float:
    if len(samples) < 2:
        return 0.0
    xs = [t for t, _ in samples]
    ys = [r for _, r in samples]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    var = sum((x - mx) ** 2 for x in xs)
    if var == 0:
        return 0.0
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var * 60.0


async def soak(server: Server, args: argparse.Namespace) -> dict[str, Any]:
    tally = Tally()
    samples: list[tuple[float, float]] = []
    deadline = time.monotonic() + args.duration_s
    async with httpx.AsyncClient(
        base_url=server.base_url,
        headers={"Authorization": f"Bearer {server.keys[0]}"},
        timeout=httpx.Timeout(60.0),
    ) as client:
        sampler = asyncio.create_task(_sample(server.pid, args.sample_s, deadline, samples))
        await asyncio.gather(
            *(_worker(i, client, deadline, args.handover_every, tally) for i in range(args.workers))
        )
        await sampler
    steady = [s for s in samples if s[0] >= args.warmup_s]
    tenth = max(1, len(steady) // 10)
    first = statistics.median(r for _, r in steady[:tenth]) if steady else float("nan")
    last = statistics.median(r for _, r in steady[-tenth:]) if steady else float("nan")
    growth = (last - first) / first if steady else float("nan")
    return {
        "duration_s": args.duration_s,
        "warmup_s": args.warmup_s,
        "workers": args.workers,
        "iterations": tally.iterations,
        "runs": tally.runs,
        "handovers_approved": tally.handovers,
        "problems": len(tally.problems),
        "examples_of_problems": tally.problems[:5],
        "rss_mb": {
            "first_tenth_median": round(first, 2),
            "last_tenth_median": round(last, 2),
            "growth": round(growth, 4),
            "max": max((r for _, r in samples), default=float("nan")),
            "slope_mb_per_min_after_warmup": round(_slope_mb_per_min(steady), 3),
        },
        "flat_within_10_percent": bool(steady) and abs(growth) <= 0.10,
        "samples": samples,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration-s", type=float, default=600.0)
    parser.add_argument("--warmup-s", type=float, default=60.0)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--sample-s", type=float, default=2.0)
    parser.add_argument("--handover-every", type=int, default=10)
    parser.add_argument("--synchronous", choices=("FULL", "NORMAL"), default="FULL")
    parser.add_argument("--small", action="store_true", help="20 s, 4 workers (CI)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    if args.small:
        args.duration_s, args.warmup_s, args.workers, args.sample_s = 20.0, 6.0, 4, 0.5
        args.handover_every = 5
    with running_server(1, synchronous=args.synchronous) as server:
        report = asyncio.run(asyncio.wait_for(soak(server, args), args.duration_s + 120))
    report["sqlite_synchronous"] = args.synchronous
    report["machine"] = {"python": platform.python_version(), "cpus": os.cpu_count()}
    text = json.dumps(report, indent=2)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n")
    shown = {k: v for k, v in report.items() if k != "samples"}
    print(json.dumps(shown, indent=2))
    return 0 if report["flat_within_10_percent"] and report["problems"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
