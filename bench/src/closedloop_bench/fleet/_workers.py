"""Workers in processes of their own, sharing one limiter through Redis, on the simulator's clock.

The fleet simulator (``_sim.py``) runs the agents and the provider; the gate of each
worker runs in a separate process: the library's :class:`~closedloop.execution.AdmissionGate`
with the PID-on-delay limiter, client-side throttling and its provider state (a
:class:`~closedloop.feedback.MemoryProviderState` for one worker, as ``closedloop serve``
has alone; a :class:`~closedloop.feedback.RedisProviderState` on a real Redis server for
several, as ``serve`` has with a Redis store), every instant it sees being the
simulator's. The simulator asks a worker for each step of an attempt (the retry budget's
deposit, throttling, one try for a permit, handing the permit back with its outcome, a
retry from the budget) and waits for the answer, so the processes advance in lock step
and a seeded run replays exactly, whatever the machine's load.

Waiting is the simulator's: a caller refused with ``full`` is tried again when a permit
of its own worker comes back, after half the gate's polling interval when one of another
worker comes back (the gate polls the shared state every ``poll_s``), and every second;
``cooldown`` holds it for the seconds named; ``open`` (the breaker) fails the call.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import statistics
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from ._metrics import Episode, interval, measure
from ._plant import SCHEDULES, ProviderConfig, Schedule, capacity_rps
from ._resume import Checkpoint
from ._sim import STRATEGIES, SimResult, _Agent, _Sim

__all__ = ["run_shared_workers", "run_workers", "write_shared"]

POLL_S = 0.02  # the gate's default polling interval for permits freed by another worker


@dataclass(frozen=True)
class _Setup:
    redis_url: str | None
    provider: str
    initial_limit: float
    frozen: bool = False


async def _serve(conn: Connection, setup: _Setup) -> None:
    from closedloop.control import ClientThrottle, DelayPIDConfig, DelayPIDLimiter, ThrottleConfig
    from closedloop.execution import AdmissionGate, Permit
    from closedloop.feedback import MemoryProviderState, RedisProviderState

    now = [0.0]
    state: Any = (
        RedisProviderState(setup.redis_url, setup.provider)
        if setup.redis_url
        else MemoryProviderState()
    )
    limiter = DelayPIDLimiter(DelayPIDConfig(initial=setup.initial_limit, frozen=setup.frozen))
    # The throttle as ``closedloop serve`` sets it; its draws come from the simulator.
    throttle = ClientThrottle(ThrottleConfig(min_requests=20))
    gate = AdmissionGate(limiter, throttle=throttle, state=state, clock=lambda: now[0])
    permits: dict[str, Permit] = {}
    try:
        while True:
            op, at, *args = conn.recv()
            now[0] = at
            if op == "stop":
                break
            if op == "deposit":
                await gate.first_attempt()
                conn.send(None)
            elif op == "retry":
                conn.send(await gate.may_retry())
            elif op == "throttle":
                conn.send(throttle.should_reject(at, args[0]))
            elif op == "enter":
                got = await gate.try_enter()
                if isinstance(got, Permit):
                    permits[got.holder] = got
                    conn.send(("ok", got.holder))
                else:
                    conn.send((got.verdict, got.value))
            elif op == "leave":
                permit = permits.pop(args[0])
                permit.outcome(args[1], retry_after_s=args[2])
                await gate.leave(permit)
                conn.send(None)
            elif op == "poll":
                conn.send(limiter.poll(at))
    finally:
        if isinstance(state, RedisProviderState):
            await state.close()
        conn.send("stopped")


def _worker(conn: Connection, setup: _Setup) -> None:
    asyncio.run(_serve(conn, setup))


class _Worker:
    """The simulator's end of one worker process."""

    def __init__(self, setup: _Setup) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.conn, theirs = ctx.Pipe()
        self.process = ctx.Process(target=_worker, args=(theirs, setup), daemon=True)
        self.process.start()
        theirs.close()
        self.waiting: deque[_Agent] = deque()
        self.holders: dict[int, str] = {}  # attempt id -> permit holder
        self.wake_at = -1.0

    def ask(self, op: str, now: float, *args: Any) -> Any:
        self.conn.send((op, now, *args))
        reply = self.conn.recv()
        if reply == "stopped":  # the worker ended on an error, printed by its process
            raise RuntimeError(f"a gate worker ended while asked {op!r}; see its error above")
        return reply

    def stop(self) -> None:
        try:
            self.conn.send(("stop", 0.0))
            self.conn.recv()
        except (OSError, EOFError):
            pass  # the worker already ended (its error is what the caller sees)
        finally:
            self.process.join(timeout=30)
            if self.process.is_alive():
                self.process.kill()


class _WorkersSim(_Sim):
    """The fleet simulator whose gates are worker processes; agent i calls through worker
    i mod n."""

    def __init__(self, workers: Sequence[_Worker], *args: Any, **kwargs: Any) -> None:
        super().__init__(STRATEGIES["PID on delay"], *args, **kwargs)
        self.workers = list(workers)

    def _of(self, agent: _Agent) -> _Worker:
        return self.workers[agent.ident % len(self.workers)]

    def tick(self, now: float) -> None:
        limit = self.workers[0].ask("poll", now)
        for worker in self.workers:
            self.wake(now, worker)
        self.out.timeline.append((now, limit, self.capacity(now)))
        self.at(now + 1.0, self.tick)

    def capacity(self, now: float) -> float:
        return capacity_rps(self.provider.config, self.sched.at(now))

    def deposit(self, now: float, agent: _Agent) -> None:
        self._of(agent).ask("deposit", now)

    def admit(self, now: float, agent: _Agent) -> None:
        worker = self._of(agent)
        if worker.ask("throttle", now, self.rng.random()):
            self.at(now + 0.5 + self.rng.random(), self.request, agent)
            return
        worker.waiting.append(agent)
        self.wake(now, worker)

    def wake(self, now: float, worker: _Worker) -> None:
        while worker.waiting:
            verdict, value = worker.ask("enter", now)
            if verdict == "ok":
                agent = worker.waiting.popleft()
                worker.holders[agent.ident] = value  # one attempt in flight per agent
                self.send(now, agent)
            elif verdict == "cooldown":
                if worker.wake_at < now + value:
                    worker.wake_at = now + value
                    self.at(now + value, self.wake, worker)
                return
            elif verdict == "open":  # the breaker: the model call fails at once
                agent = worker.waiting.popleft()
                self.out.failures.append(now)
                self.at(now + 1.0, self.start_run, agent)
            else:
                return

    def observe(self, now: float, agent: _Agent, status: int, ra: float) -> None:
        worker = self._of(agent)
        outcome = {200: "ok", -1: "timeout"}.get(status, "rejected")
        holder = worker.holders.pop(agent.ident)
        worker.ask("leave", now, holder, outcome, ra if status == 429 else None)
        self.wake(now, worker)
        for other in self.workers:
            if other is not worker and other.waiting:
                self.at(now + POLL_S / 2, self.wake, other)

    def take_retry(self, now: float, agent: _Agent) -> bool:
        return bool(self._of(agent).ask("retry", now))


def run_workers(
    workers: int,
    sched: Schedule,
    seed: int,
    *,
    redis_url: str | None,
    config: ProviderConfig | None = None,
    initial_limit: float = 20.0,
    frozen: bool = False,
) -> SimResult:
    """One seeded run with ``workers`` gate processes (their state in Redis when
    ``redis_url`` is given, else in the one worker's memory); ``frozen`` holds every
    worker's limit at ``initial_limit``."""
    if workers > 1 and redis_url is None:
        raise ValueError("several workers share their limiter through Redis: give redis_url")
    setup = _Setup(redis_url, f"fleet-{uuid.uuid4().hex[:8]}", initial_limit, frozen)
    procs = [_Worker(setup) for _ in range(workers)]
    try:
        plant = config or sched.plant or ProviderConfig()
        sim = _WorkersSim(procs, sched, sched.clients, seed, plant, initial_limit)
        return sim.run()
    finally:
        for proc in procs:
            proc.stop()


ARMS = ("one worker", "two workers")


def run_shared_workers(
    seeds: Sequence[int],
    schedules: Sequence[str],
    *,
    redis_url: str,
    progress: Callable[[str], None] | None = None,
    checkpoint: Checkpoint | None = None,
) -> dict[str, Any]:
    """One worker (state in its memory) against two (state in Redis), the same agents split
    between them, on each schedule and seed; paired differences of goodput and p99."""
    out: dict[str, Any] = {}
    total, done = len(seeds) * len(schedules) * len(ARMS), 0
    for name in schedules:
        sched = SCHEDULES[name]
        plant = sched.plant or ProviderConfig()
        eps: dict[str, list[Episode]] = {arm: [] for arm in ARMS}
        for seed in seeds:
            for workers, arm in enumerate(ARMS, start=1):
                cell = f"{name}/{arm}/{seed}"
                kept = checkpoint.cells.get(cell) if checkpoint else None
                if kept is None:
                    url = redis_url if workers > 1 else None
                    kept = [measure(run_workers(workers, sched, seed, redis_url=url), sched, plant)]
                    if checkpoint:
                        checkpoint.add(cell, kept)
                eps[arm] += kept
                done += 1
                if progress:
                    progress(f"{done}/{total} {cell}: goodput {kept[0].goodput:.4f}")
        out[name] = _compare(eps, seeds)
    return {"seeds": list(seeds), "poll_s": POLL_S, "schedules": out}


def _compare(eps: dict[str, list[Episode]], seeds: Sequence[int]) -> dict[str, Any]:
    one, two = eps["one worker"], eps["two workers"]
    rel = [b.goodput / a.goodput - 1.0 for a, b in zip(one, two, strict=True)]
    mean, lo, hi = interval(rel)
    return {
        "rows": [
            {
                "seed": seed,
                "one_worker": _figures(a),
                "two_workers": _figures(b),
                "relative_difference": round(r, 4),
            }
            for seed, a, b, r in zip(seeds, one, two, rel, strict=True)
        ],
        "one_worker_goodput": round(statistics.fmean(e.goodput for e in one), 4),
        "two_workers_goodput": round(statistics.fmean(e.goodput for e in two), 4),
        "relative_difference": {"mean": round(mean, 4), "lo": round(lo, 4), "hi": round(hi, 4)},
        "within_5_percent": lo > -0.05,
    }


def _figures(e: Episode) -> dict[str, float]:
    return {
        "goodput_of_capacity": round(e.goodput, 4),
        "attempts_per_success": round(e.attempts_per_success, 4),
        "p99_run_s": round(e.p99_s, 3),
        "failures": e.failures,
    }


def write_shared(report: dict[str, Any], out: Path, command: str) -> Path:
    """``shared.json`` in ``out``, with the command that rewrites it."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "shared.json"
    path.write_text(json.dumps({"command": command, **report}, indent=2) + "\n")
    return path
