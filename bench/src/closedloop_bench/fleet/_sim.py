"""Many agents against one provider: the client strategies, simulated event by event.

Each of ``clients`` agents runs task after task; a task is ``calls`` model calls with a
think time (tool work) between them. A strategy decides how an attempt is sent (at once,
after a cooldown, or through a concurrency limit) and what a refusal or timeout leads to
(stop, retry as the SDKs do, tenacity's jittered exponential backoff, or a retry
budget with client-side throttling and Retry-After honoured). Everything runs on the
simulator's clock: a seeded run is replayable and takes well under a second.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from closedloop.control import (
    AIMDConfig,
    AIMDLimiter,
    ClientThrottle,
    Cooldown,
    DelayPIDConfig,
    DelayPIDLimiter,
    GradientConfig,
    GradientLimiter,
    RetryBudget,
)

from ._plant import Job, Provider, ProviderConfig, Schedule, capacity_rps

__all__ = ["STRATEGIES", "FleetStrategy", "SimResult", "simulate"]

# The feed-forward arms take the whole estimated deficit off the limit (a limit right for
# the full capacity is (1 − d) too large when a share d of it is missing), less what the
# feedback has absorbed: the estimate's excess over its own 10-s average (a washout).
FEEDFORWARD = 1.0
WASHOUT_S = 10.0

Retry = Literal["none", "sdk", "tenacity", "router", "budget"]
LimiterKind = Literal["aimd", "gradient", "pid"]


@dataclass(frozen=True)
class FleetStrategy:
    """How a client sends and retries; ``limiter`` set means a concurrency limit."""

    name: str
    retry: Retry
    limiter: LimiterKind | None = None
    frozen: bool = False
    feedforward: float = 0.0


STRATEGIES: dict[str, FleetStrategy] = {
    s.name: s
    for s in (
        FleetStrategy("fixed, no retries", "none"),
        FleetStrategy("fixed, two retries (SDK)", "sdk"),
        FleetStrategy("fixed, tenacity backoff", "tenacity"),
        FleetStrategy("fixed, cooldown router", "router"),
        FleetStrategy("AIMD", "budget", "aimd"),
        FleetStrategy("AIMD + feed-forward", "budget", "aimd", feedforward=FEEDFORWARD),
        FleetStrategy("AIMD frozen", "budget", "aimd", frozen=True),
        FleetStrategy("gradient", "budget", "gradient"),
        FleetStrategy("gradient + feed-forward", "budget", "gradient", feedforward=FEEDFORWARD),
        FleetStrategy("gradient frozen", "budget", "gradient", frozen=True),
        FleetStrategy("PID on delay", "budget", "pid"),
        FleetStrategy("PID on delay + feed-forward", "budget", "pid", feedforward=FEEDFORWARD),
        FleetStrategy("PID on delay frozen", "budget", "pid", frozen=True),
    )
}

TIMEOUT_S = 10.0
CALLS = 4
THINK_S = 1.0
ROUTER_COOLDOWN_S = 5.0
INITIAL_LIMIT = 20.0  # Netflix concurrency-limits' default initial limit


@dataclass
class SimResult:
    """What one run of the simulator observed."""

    runs_done: list[tuple[float, float]] = field(default_factory=list)
    failures: list[float] = field(default_factory=list)
    attempts: int = 0
    calls_ok: int = 0
    calls_done: list[float] = field(default_factory=list)
    flags: list[float] = field(default_factory=list)
    timeline: list[tuple[float, float, float]] = field(default_factory=list)
    rejections: list[tuple[float, int]] = field(default_factory=list)
    limited: bool = False  # a limiter (and so an onset flag) was at work
    peak_inflight: int = 0  # the most attempts in the provider's hands at once


@dataclass
class _Agent:
    ident: int
    run_no: int = 0
    started: float = 0.0
    call: int = 0
    attempt: int = 0
    live: int = -1
    sent: float = 0.0


def _limiter(strategy: FleetStrategy, initial: float) -> Any:
    ff, frozen = strategy.feedforward, strategy.frozen
    if strategy.limiter == "aimd":
        return AIMDLimiter(
            AIMDConfig(initial=initial, frozen=frozen, feedforward=ff, washout_s=WASHOUT_S)
        )
    if strategy.limiter == "gradient":
        return GradientLimiter(
            GradientConfig(initial=initial, frozen=frozen, feedforward=ff, washout_s=WASHOUT_S)
        )
    return DelayPIDLimiter(
        DelayPIDConfig(initial=initial, frozen=frozen, feedforward=ff, washout_s=WASHOUT_S)
    )


class _Sim:
    def __init__(
        self,
        strategy: FleetStrategy,
        sched: Schedule,
        clients: int,
        seed: int,
        config: ProviderConfig,
        initial_limit: float = INITIAL_LIMIT,
    ) -> None:
        self.s, self.sched, self.seed = strategy, sched, seed
        self.provider = Provider(config, sched, seed)
        self.rng = random.Random(seed * 7919 + 1)
        self.heap: list[tuple[float, int, Callable[..., None], tuple[Any, ...]]] = []
        self.seq = itertools.count()
        self.agents = [_Agent(i) for i in range(clients)]
        self.ids = itertools.count()
        self.inflight = 0
        self.waiting: deque[_Agent] = deque()
        self.cooldown = Cooldown()
        self.throttle = ClientThrottle()
        self.budget = RetryBudget()
        self.limiter = _limiter(strategy, initial_limit) if strategy.limiter else None
        self.out = SimResult(limited=self.limiter is not None)
        self._flagged = False
        self._wake = -1.0  # the instant a dispatch is already booked for (a cooldown's end)
        self._owners: dict[int, _Agent] = {}  # attempts in the provider, by id

    def at(self, t: float, fn: Callable[..., None], *args: Any) -> None:
        heapq.heappush(self.heap, (t, next(self.seq), fn, args))

    def run(self) -> SimResult:
        for agent in self.agents:
            self.at(self.rng.random() * THINK_S, self.start_run, agent)
        self.at(0.0, self.tick)
        while self.heap:
            t, _, fn, args = heapq.heappop(self.heap)
            if t > self.sched.duration_s:
                break
            fn(t, *args)
        self.out.rejections = self.provider.rejections
        return self.out

    # --- the clock's own events ---------------------------------------------------------
    def tick(self, now: float) -> None:
        limit = float("nan")
        if self.limiter is not None:
            limit = self.limiter.poll(now)
            if self.limiter.congested and not self._flagged:
                self.out.flags.append(now)
            self._flagged = self.limiter.congested
            self.dispatch(now)
        cap = capacity_rps(self.provider.config, self.sched.at(now))
        self.out.timeline.append((now, limit, cap))
        self.at(now + 1.0, self.tick)

    # --- an agent's task ------------------------------------------------------------------
    def start_run(self, now: float, agent: _Agent) -> None:
        agent.run_no += 1
        agent.started, agent.call = now, 0
        self.begin_call(now, agent)

    def begin_call(self, now: float, agent: _Agent) -> None:
        agent.attempt = 0
        if self.s.limiter is not None:
            self.deposit(now, agent)
        self.request(now, agent)

    def request(self, now: float, agent: _Agent) -> None:
        if self.s.retry == "router" and self.cooldown.wait_s(now) > 0:
            self.at(self.cooldown.until, self.request, agent)
            return
        if self.s.limiter is None:
            self.send(now, agent)
            return
        self.admit(now, agent)

    # --- the gate: limit, Retry-After, throttle, budget (overridden by the workers' sim) ---
    def deposit(self, now: float, agent: _Agent) -> None:
        self.budget.on_first_attempt(now)

    def take_retry(self, now: float, agent: _Agent) -> bool:
        return self.budget.try_retry(now)

    def admit(self, now: float, agent: _Agent) -> None:
        if self.cooldown.wait_s(now) > 0:
            self.at(self.cooldown.until, self.request, agent)
            return
        if self.throttle.should_reject(now, self.rng.random()):
            self.at(now + 0.5 + self.rng.random(), self.request, agent)
            return
        self.waiting.append(agent)
        self.dispatch(now)

    def dispatch(self, now: float) -> None:
        assert self.limiter is not None
        if self.waiting and self.cooldown.wait_s(now) > 0:
            # As the gate does: a pending Retry-After holds the callers already waiting.
            if self._wake != self.cooldown.until:
                self._wake = self.cooldown.until
                self.at(self.cooldown.until, self.dispatch)
            return
        while self.waiting and self.inflight < max(1, int(self.limiter.limit)):
            self.send(now, self.waiting.popleft())

    def send(self, now: float, agent: _Agent) -> None:
        ident = next(self.ids)
        agent.live, agent.sent = ident, now
        self.inflight += 1
        self.out.peak_inflight = max(self.out.peak_inflight, self.inflight)
        self.out.attempts += 1
        # Tokens per (seed, agent, run, call): every strategy is given the same work.
        draw = random.Random(hash((self.seed, agent.ident, agent.run_no, agent.call)))
        job = Job(
            ident, draw.randint(self.provider.config.tokens_lo, self.provider.config.tokens_hi), now
        )
        status, retry_after = self.provider.arrive(now, job)
        if status:
            late = now + self.provider.config.reject_latency_s
            self.at(late, self.answer, agent, ident, status, retry_after)
        else:
            self.start_jobs(now)
        self.at(now + TIMEOUT_S, self.answer, agent, ident, -1, 0.0)
        self._owners[ident] = agent

    def start_jobs(self, now: float) -> None:
        for t_done, job in self.provider.start_next(now):
            self.at(t_done, self.job_done, job)

    def job_done(self, now: float, job: Job) -> None:
        self.provider.finish()
        self.start_jobs(now)
        agent = self._owners.pop(job.ident, None)
        if agent is not None:
            self.answer(now, agent, job.ident, 200, 0.0)

    def answer(self, now: float, agent: _Agent, ident: int, status: int, ra: float) -> None:
        if agent.live != ident:
            return  # already answered or timed out: the provider's work is wasted
        agent.live = -1
        self.inflight -= 1
        if self.s.limiter is not None:
            self.observe(now, agent, status, ra)
        if status == 200:
            self.out.calls_ok += 1
            self.out.calls_done.append(now)
            agent.call += 1
            if agent.call >= CALLS:
                self.out.runs_done.append((now, now - agent.started))
                self.at(now, self.start_run, agent)
            else:
                self.at(now + self.rng.expovariate(1 / THINK_S), self.begin_call, agent)
            return
        self.retry(now, agent, status, ra)

    def observe(self, now: float, agent: _Agent, status: int, ra: float) -> None:
        """An attempt's answer (200, 429, 503, or -1 for the client's timeout) to the gate."""
        assert self.limiter is not None
        outcome = {200: "ok", -1: "timeout"}.get(status, "rejected")
        self.limiter.record(now, now - agent.sent, outcome, self.inflight + 1)
        self.throttle.record(now, accepted=status in (200, -1))
        if status == 429:  # the gate holds every caller for a Retry-After, retry or not
            self.cooldown.honour(now, ra)
        self.dispatch(now)

    def retry(self, now: float, agent: _Agent, status: int, ra: float) -> None:
        k, mode = agent.attempt, self.s.retry
        delay: float | None = None
        if mode == "sdk" and k < 2:
            backoff = min(8.0, 0.5 * 2**k) * (1 - 0.25 * self.rng.random())
            delay = ra if 0 < ra <= 60 else backoff
        elif mode == "tenacity" and k < 4:
            delay = self.rng.random() * min(30.0, 0.5 * 2**k)
        elif mode == "router" and k < 2:
            if status in (429, 503):
                self.cooldown.honour(now, ROUTER_COOLDOWN_S)
            delay = 0.0
        elif mode == "budget" and k < 2 and self.take_retry(now, agent):
            delay = max(ra, 0.5 * 2**k * (0.5 + self.rng.random()))
        if delay is None:
            self.out.failures.append(now)
            self.at(now + THINK_S, self.start_run, agent)
            return
        agent.attempt += 1
        self.at(now + delay, self.request, agent)


def simulate(
    strategy: FleetStrategy,
    sched: Schedule,
    *,
    clients: int | None = None,
    seed: int = 0,
    config: ProviderConfig | None = None,
    initial_limit: float = INITIAL_LIMIT,
) -> SimResult:
    """One seeded, replayable run of ``strategy`` under ``sched`` (on ``config``, else the
    schedule's own plant, else the default provider)."""
    plant = config or sched.plant or ProviderConfig()
    sim = _Sim(strategy, sched, clients or sched.clients, seed, plant, initial_limit)
    return sim.run()
