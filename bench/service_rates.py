"""The arrival-rate sweep of ``service_load.py``: the highest steady rate of new runs.

Open-loop arrivals: at each rate, runs arrive for a short window at Poisson times
(exponential gaps, a fixed random stream per rate), each posted when its time comes
whether or not the earlier ones have finished, so a server that falls behind is not
helped by a client that waits for it. After the window the client waits for every run to
end (bounded by ``drain_s``) and reads each run's timing. A rate holds when every run
ended within the drain bound and the p99 control overhead per step (the run's wall time
less its model time, over its steps) stayed under the limit; the sweep climbs until a
rate does not hold and reports the highest that did. The client shares the machine with
the server, so its own requests are in the figures too.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from pathlib import Path
from typing import Any

import httpx
from service_load import (
    Server,
    Session,
    _overheads,
    _start,
    clients,
    get_json,
    running_server,
    summary,
)

FULL_RATES = (5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 60.0, 80.0, 100.0, 120.0, 150.0)
QUICK_RATES = (5.0, 10.0, 20.0, 40.0, 80.0, 120.0)
LIMIT_MS = 200.0
"""The p99 control overhead per step a steady rate stays under."""


def arrivals(rate: float, window_s: float, stream: int) -> list[float]:
    """Poisson arrival times in ``[0, window_s)`` at ``rate`` per second."""
    rng = random.Random(stream)
    times, t = [], rng.expovariate(rate)
    while t < window_s:
        times.append(t)
        t += rng.expovariate(rate)
    return times


async def _arrive(
    session: Session, client: httpx.AsyncClient, at: float, t0: float, gate: asyncio.Semaphore
) -> None:
    await asyncio.sleep(max(0.0, t0 + at - time.perf_counter()))
    try:
        await _start(session, client, gate)
    except httpx.HTTPError as exc:
        session.problems.append(f"start failed: {type(exc).__name__}")


async def _drain(by_key: dict[str, httpx.AsyncClient], deadline: float, poll_s: float) -> bool:
    """Wait until no run is running; False when ``deadline`` passed first."""
    pending = set(by_key)
    while pending:
        for key in list(pending):
            running = await get_json(
                by_key[key], "/v1/runs", params={"status": "running", "limit": 1}
            )
            if not running["runs"]:
                pending.discard(key)
        if not pending:
            break
        if time.perf_counter() > deadline:
            return False
        await asyncio.sleep(poll_s)
    return True


async def at_rate(
    server: Server,
    rate: float,
    *,
    window_s: float,
    drain_s: float,
    concurrency: int = 256,
    poll_s: float = 0.1,
    first_index: int = 0,
) -> dict[str, Any]:
    """Offer ``rate`` runs per second for ``window_s``; the figures of that window."""
    times = arrivals(rate, window_s, stream=int(rate * 1000))
    jobs = [
        Session(first_index + i, server.keys[i % len(server.keys)], i, 2_000_003 + 7 * i)
        for i in range(len(times))
    ]
    gate = asyncio.Semaphore(concurrency)
    async with clients(server, concurrency) as by_key:
        t0 = time.perf_counter()
        await asyncio.gather(
            *(_arrive(s, by_key[s.key], at, t0, gate) for s, at in zip(jobs, times, strict=True))
        )
        posted_s = time.perf_counter() - t0
        drained = await _drain(by_key, t0 + window_s + drain_s, poll_s)
        done_s = time.perf_counter() - t0
        for s in jobs:
            if s.run_id:
                path = f"/v1/sessions/{s.session_id}/runs/{s.run_id}"
                s.run = await get_json(by_key[s.key], path)
    overhead, _, steps = _overheads([s for s in jobs if s.run.get("status") == "done"])
    failed = sum(1 for s in jobs if s.problems or s.run.get("status") != "done")
    p99 = summary(overhead, 1000.0)["p99"] if overhead else float("inf")
    return {
        "offered_runs_per_s": rate,
        "runs": len(jobs),
        "achieved_runs_per_s": round(len(jobs) / done_s, 2) if done_s else None,
        "posting_s": round(posted_s, 3),
        "drained": drained,
        "not_done": failed,
        "steps": steps,
        "control_overhead_ms_per_step": summary(overhead, 1000.0) if overhead else None,
        "steady": drained and failed == 0 and p99 < LIMIT_MS,
    }


async def sweep(
    server: Server,
    rates: tuple[float, ...],
    *,
    window_s: float,
    drain_s: float,
    poll_s: float = 0.1,
) -> dict[str, Any]:
    """Climb ``rates`` until one is not steady; the highest steady rate and every window."""
    windows: list[dict[str, Any]] = []
    best: float | None = None
    index = 10_000_000
    for rate in rates:
        window = await at_rate(
            server, rate, window_s=window_s, drain_s=drain_s, poll_s=poll_s, first_index=index
        )
        index += window["runs"]
        windows.append(window)
        if not window["steady"]:
            break
        best = rate
    return {
        "highest_steady_runs_per_s": best,
        "limit_p99_control_overhead_ms_per_step": LIMIT_MS,
        "window_s": window_s,
        "drain_s": drain_s,
        "windows": windows,
        "note": (
            "open-loop Poisson arrivals, one short window per rate, climbing until a rate "
            "is not steady (a run not done within the drain bound, or p99 control overhead "
            f"per step >= {LIMIT_MS:.0f} ms); the client runs on the same cores as the server"
        ),
    }


def run_sweep(server: Server, *, quick: bool, timeout_s: float, synchronous: str) -> dict[str, Any]:
    """The arrival-rate sweep against ``server`` (short windows when ``quick``)."""
    rates, window_s, drain_s = (QUICK_RATES, 4.0, 4.0) if quick else (FULL_RATES, 10.0, 10.0)
    started = time.perf_counter()
    result = asyncio.run(
        asyncio.wait_for(sweep(server, rates, window_s=window_s, drain_s=drain_s), timeout_s)
    )
    result["quick"] = quick
    result["wall_s"] = round(time.perf_counter() - started, 3)
    result["sqlite_synchronous"] = synchronous
    return result


def quick_sweep(out: Path, keys: int, synchronous: str, timeout_s: float) -> int:
    """``--quick``: the short sweep alone, written into ``out`` beside the load figures."""
    with running_server(keys, synchronous=synchronous) as server:
        result = run_sweep(server, quick=True, timeout_s=timeout_s, synchronous=synchronous)
    report: dict[str, Any] = json.loads(out.read_text()) if out.exists() else {}
    report["arrival_rate_sweep"] = result
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0
