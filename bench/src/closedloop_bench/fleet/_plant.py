"""A rate-limited model provider as a discrete-event plant on a virtual clock.

Token buckets on requests and tokens per minute (a request is refused with 429 and a
Retry-After when either is short), ``servers`` workers behind a FIFO queue of
``queue_limit`` (503 when it is full), a service time that grows with the batch in
service, and work that is done whether or not the client is still waiting (a client
timeout does not cancel it). A provider may also shed load (``shed_wait_s``): refuse a
request with 429 and a Retry-After of 1 s when the work already queued would take longer
than that to start (the "engine overloaded" 429 of hosted model APIs); then queueing delay
grows before the refusals come, which a bucket that shrinks at once never shows. A
capacity schedule scales servers, speed and buckets over time; the capacity it implies is
the physical limit goodput is measured against.
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["SCHEDULES", "Capacity", "Provider", "ProviderConfig", "Schedule", "schedule"]


@dataclass(frozen=True)
class ProviderConfig:
    """The provider at full capacity."""

    servers: int = 16
    queue_limit: int = 256
    rpm: float = 1500.0
    tpm: float = 1_500_000.0
    bucket_s: float = 2.0
    overhead_s: float = 0.2
    tokens_per_s: float = 1000.0
    batch_slowdown: float = 0.3
    reject_latency_s: float = 0.05
    tokens_lo: int = 300
    tokens_hi: int = 700
    shed_wait_s: float | None = None

    def mean_service_s(self, speed: float = 1.0) -> float:
        """Mean service time with every server busy."""
        tokens = (self.tokens_lo + self.tokens_hi) / 2
        return (self.overhead_s + tokens / self.tokens_per_s) / speed * (1 + self.batch_slowdown)


@dataclass(frozen=True)
class Capacity:
    """Multipliers at one instant: servers, speed, and the share of the buckets left to us."""

    servers: float = 1.0
    speed: float = 1.0
    bucket: float = 1.0


@dataclass(frozen=True)
class Schedule:
    """A named capacity schedule: onset, return and the multipliers at each time."""

    name: str
    duration_s: float
    at: Callable[[float], Capacity]
    onset_s: float | None = None
    return_s: float | None = None
    clients: int = 100
    plant: ProviderConfig | None = None  # None: the benchmark's default provider


def _steady(t: float) -> Capacity:
    return Capacity()


def _step(t: float) -> Capacity:
    return Capacity(0.4, 1.0, 0.4) if 100.0 <= t < 200.0 else Capacity()


def _brownout(t: float) -> Capacity:
    if 60.0 <= t < 200.0:
        return Capacity(1.0, max(0.4, 1.0 - 0.6 * (t - 60.0) / 90.0), 1.0)
    return Capacity()


def _burst(t: float) -> Capacity:
    # Other tenants of the same organisation take 70 % of the shared rate limit.
    return Capacity(1.0, 1.0, 0.3) if 100.0 <= t < 160.0 else Capacity()


# The brownout on a provider that sheds load once its queue holds more than half a
# client's timeout of waiting: the 429s come after the queue has grown.
SHEDDING = ProviderConfig(shed_wait_s=5.0)

SCHEDULES: dict[str, Schedule] = {
    "steady": Schedule("steady", 300.0, _steady, clients=200),
    "step": Schedule("step", 300.0, _step, onset_s=100.0, return_s=200.0),
    "brownout": Schedule("brownout", 300.0, _brownout, onset_s=60.0, return_s=200.0),
    "burst": Schedule("burst", 300.0, _burst, onset_s=100.0, return_s=160.0),
    "shed": Schedule("shed", 300.0, _brownout, onset_s=60.0, return_s=200.0, plant=SHEDDING),
}


def schedule(name: str) -> Schedule:
    """The schedule called ``name``; a clear error naming the known ones otherwise."""
    if name not in SCHEDULES:
        raise ValueError(f"unknown schedule {name!r}; known: {', '.join(SCHEDULES)}")
    return SCHEDULES[name]


def capacity_rps(config: ProviderConfig, cap: Capacity) -> float:
    """Requests per second the provider can finish: the tightest of buckets and servers."""
    tokens = (config.tokens_lo + config.tokens_hi) / 2
    servers = max(1, round(config.servers * cap.servers))
    return min(
        config.rpm * cap.bucket / 60.0,
        config.tpm * cap.bucket / 60.0 / tokens,
        servers / config.mean_service_s(cap.speed),
    )


@dataclass
class Job:
    """One attempt inside the provider."""

    ident: int
    tokens: int
    arrived: float


class Provider:
    """The plant's state; the simulator calls :meth:`arrive` and :meth:`finish`."""

    def __init__(self, config: ProviderConfig, sched: Schedule, seed: int) -> None:
        self.config = config
        self.schedule = sched
        self.rng = random.Random(seed)
        self.req_tokens = config.rpm * config.bucket_s / 60.0
        self.tok_tokens = config.tpm * config.bucket_s / 60.0
        self._refilled = 0.0
        self.queue: deque[Job] = deque()
        self.busy = 0
        self.work_done = 0
        self.rejections: list[tuple[float, int]] = []

    def draw_tokens(self) -> int:
        return self.rng.randint(self.config.tokens_lo, self.config.tokens_hi)

    def _refill(self, now: float) -> Capacity:
        cap = self.schedule.at(now)
        dt = now - self._refilled
        self._refilled = now
        cfg = self.config
        self.req_tokens = min(
            cfg.rpm * cap.bucket * cfg.bucket_s / 60.0,
            self.req_tokens + dt * cfg.rpm * cap.bucket / 60.0,
        )
        self.tok_tokens = min(
            cfg.tpm * cap.bucket * cfg.bucket_s / 60.0,
            self.tok_tokens + dt * cfg.tpm * cap.bucket / 60.0,
        )
        return cap

    def servers(self, now: float) -> int:
        return max(1, round(self.config.servers * self.schedule.at(now).servers))

    def arrive(self, now: float, job: Job) -> tuple[int, float]:
        """Admit or refuse: (status, retry_after_s); 0 means queued or in service."""
        cap = self._refill(now)
        cfg = self.config
        if self.req_tokens < 1.0 or self.tok_tokens < job.tokens:
            need_req = max(0.0, 1.0 - self.req_tokens) / (cfg.rpm * cap.bucket / 60.0)
            need_tok = max(0.0, job.tokens - self.tok_tokens) / (cfg.tpm * cap.bucket / 60.0)
            self.rejections.append((now, 429))
            return 429, float(math.ceil(max(need_req, need_tok)))
        if cfg.shed_wait_s is not None and self.queued_wait_s(now) > cfg.shed_wait_s:
            self.rejections.append((now, 429))
            return 429, 1.0
        if len(self.queue) >= cfg.queue_limit:
            self.rejections.append((now, 503))
            return 503, 0.0
        self.req_tokens -= 1.0
        self.tok_tokens -= job.tokens
        self.queue.append(job)
        return 0, 0.0

    def queued_wait_s(self, now: float) -> float:
        """How long the work already queued takes to reach a server, at today's speed."""
        speed = self.schedule.at(now).speed
        return len(self.queue) * self.config.mean_service_s(speed) / self.servers(now)

    def start_next(self, now: float) -> list[tuple[float, Job]]:
        """Move queued jobs onto free servers; their finishing times."""
        started = []
        while self.queue and self.busy < self.servers(now):
            job = self.queue.popleft()
            self.busy += 1
            cap = self.schedule.at(now)
            slow = 1 + self.config.batch_slowdown * self.busy / self.servers(now)
            service = (self.config.overhead_s + job.tokens / self.config.tokens_per_s) * slow
            started.append((now + service / cap.speed, job))
        return started

    def finish(self) -> None:
        self.busy -= 1
        self.work_done += 1
