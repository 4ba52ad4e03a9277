"""Two workers sharing one limiter through Redis, in real time on the loopback plant.

A check that the library's HTTP client stack shares a limit through Redis end to end
(``tests/closedloop_bench/fleet/test_shared.py``); the measurement of two workers against
one is ``_workers.py``'s, on the simulator's clock, where a run replays and the machine's
load does not enter the figures. Both arms run the library's real client stack (``OpenAICompatible`` → ``GatedModel`` →
``AdmissionGate`` with the PID-on-delay limiter, a retry budget and the circuit breaker)
against the fleet plant on loopback HTTP (``_http.py``), ``clients`` concurrent callers in
all, each calling again as soon as its call ends. **one worker**: one gate, state in
process. **two workers**: half the callers on each of two gates, each with its own
limiter and its own Redis connection, their permits, budget and breaker in one Redis
state (``RedisProviderState``), so the limit is shared. The two "workers" share an event
loop but nothing else of the client; the provider cannot tell them apart from two hosts.

Goodput: successful calls per plant second after the warm-up, over the capacity the
schedule leaves (``capacity_rps``), as in the fleet report. Real time, scaled: the plant
runs ``time_scale`` times faster than the wall clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from closedloop import ModelError
from closedloop.control import ClientThrottle, DelayPIDLimiter, ThrottleConfig
from closedloop.execution import AdmissionGate
from closedloop.feedback import MemoryProviderState, RedisProviderState
from closedloop.models import GatedModel, OpenAICompatible

from ._http import PlantEndpoint, serve_plant
from ._plant import Capacity, ProviderConfig, Schedule, capacity_rps

__all__ = ["SHARED_CONFIG", "redis_server", "run_shared", "shared_schedule"]

SHARED_CONFIG = ProviderConfig(servers=4, queue_limit=64, rpm=600.0, tpm=600_000.0)


def shared_schedule(duration_s: float = 90.0) -> Schedule:
    """Full capacity, then 40 % of servers and buckets for the middle third, then full."""
    lo, hi = duration_s / 3, 2 * duration_s / 3

    def at(t: float) -> Capacity:
        return Capacity(0.4, 1.0, 0.4) if lo <= t < hi else Capacity()

    return Schedule("step", duration_s, at, onset_s=lo, return_s=hi)


async def _arm(
    states: Sequence[MemoryProviderState | RedisProviderState],
    clients: int,
    schedule: Schedule,
    seed: int,
    time_scale: float,
) -> dict[str, Any]:
    endpoint = PlantEndpoint(SHARED_CONFIG, schedule, seed=seed, time_scale=time_scale)
    plant = serve_plant(endpoint)
    models: list[GatedModel] = []
    try:
        for state in states:
            gate = AdmissionGate(
                DelayPIDLimiter(start=time.time()),  # the gate's clock: every worker's
                throttle=ClientThrottle(ThrottleConfig(min_requests=20)),
                state=state,
                clock=time.time,
            )
            models.append(GatedModel(OpenAICompatible(plant.base_url, "fleet", timeout=5.0), gate))
        done: list[float] = []

        async def caller(model: GatedModel) -> None:
            while endpoint.now() < schedule.duration_s:
                with contextlib.suppress(ModelError):
                    await model.complete("work")
                    done.append(endpoint.now())

        await asyncio.gather(*(caller(models[i % len(models)]) for i in range(clients)))
    finally:
        for model in models:
            await model.aclose()
        plant.stop()
    return _goodput(done, endpoint, schedule)


def _goodput(done: list[float], endpoint: PlantEndpoint, schedule: Schedule) -> dict[str, Any]:
    warmup = schedule.duration_s / 6
    ok = [t for t in done if warmup <= t < schedule.duration_s]
    steps = [warmup + k for k in range(int(schedule.duration_s - warmup))]
    capacity = sum(capacity_rps(SHARED_CONFIG, schedule.at(t)) for t in steps)
    refused = sum(1 for t, status in endpoint.log if status != 200 and t >= warmup)
    return {
        "goodput_of_capacity": round(len(ok) / capacity, 4),
        "successes": len(ok),
        "attempts": sum(1 for t, _ in endpoint.log if t >= warmup),
        "refused": refused,
    }


@contextlib.contextmanager
def redis_server() -> Iterator[str]:
    """A throwaway redis-server on a free loopback port (no persistence)."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server is not on PATH: install it, or pass --redis URL")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with tempfile.TemporaryDirectory() as folder:
        args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", folder]
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 10
            while True:
                with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port)):
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError("redis-server did not start")
                time.sleep(0.05)
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            proc.terminate()
            proc.wait(timeout=10)


async def _pair(url: str, clients: int, schedule: Schedule, seed: int, scale: float) -> Any:
    one = await _arm([MemoryProviderState()], clients, schedule, seed, scale)
    states = [RedisProviderState(url, f"fleet-{seed}") for _ in range(2)]
    await states[0].clear()
    try:
        two = await _arm(states, clients, schedule, seed, scale)
    finally:
        for state in states:
            await state.close()
    return one, two


def run_shared(
    seeds: Sequence[int] = (10, 11, 12),
    *,
    clients: int = 40,
    duration_s: float = 90.0,
    time_scale: float = 10.0,
    redis_url: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Both arms on each seed; the paired difference of goodput per seed."""
    schedule = shared_schedule(duration_s)
    rows = []
    with contextlib.ExitStack() as stack:
        url = redis_url or stack.enter_context(redis_server())
        for seed in seeds:
            one, two = asyncio.run(_pair(url, clients, schedule, seed, time_scale))
            rows.append({"seed": seed, "one_worker": one, "two_workers": two})
            if progress:
                progress(f"seed {seed}: one {one}, two {two}")
    one_mean = sum(r["one_worker"]["goodput_of_capacity"] for r in rows) / len(rows)
    two_mean = sum(r["two_workers"]["goodput_of_capacity"] for r in rows) / len(rows)
    return {
        "plant": {**SHARED_CONFIG.__dict__, "schedule": "step: 40 % for the middle third"},
        "clients": clients,
        "duration_s": duration_s,
        "time_scale": time_scale,
        "rows": rows,
        "one_worker_goodput": round(one_mean, 4),
        "two_workers_goodput": round(two_mean, 4),
        "relative_difference": round((two_mean - one_mean) / one_mean, 4) if one_mean else None,
        "target": "two workers within 5 % of one",
    }
