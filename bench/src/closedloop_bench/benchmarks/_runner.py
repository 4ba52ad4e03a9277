"""Running the faults benchmark: cells, episodes, concurrency and the ground truth.

A cell is a fault profile × a number of steps; it holds N episodes, each a task of the
evaluation split with that many ideal calls and a fault seed. Every strategy runs every
episode on a world of its own, reset with the episode's fault seed, so all strategies
meet the same faults at the same request indices. Episodes run concurrently on one event
loop (the worlds' latencies overlap); jobs are ordered episode by episode, so the
strategies' identical first model calls meet in the completion cache. An
:class:`EpisodeExecutor` decides how jobs run: :class:`AsyncioExecutor` here, or
``RayExecutor`` (``closedloop_bench.benchmarks._ray``), whose Ray tasks serve worlds of their own.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from closedloop._exceptions import (
    ConfigurationError,
    ModelAuthError,
    ModelLoadError,
    ModelNotAvailableError,
    RealModelCallBlockedError,
)
from closedloop._validation import require_int_at_least, require_non_negative
from closedloop.agent import TraceSink
from closedloop.feedback import MemoryStore
from closedloop.models import MeteredModel

from ..reference import Answer, ReferenceTask, WorldTools, check, load_tasks, load_world_tasks
from ..world import World, load_profile
from ._models import ModelSource, model_source
from ._oracle import fault_summary, handover_justified, oracle_verdict
from ._report import EpisodeResult
from ._strategies import STRATEGY_NAMES, BenchStrategy, Episode, Limits, Outcome, get_strategy
from ._worlds import WorldFarm

__all__ = [
    "AsyncioExecutor",
    "EpisodeExecutor",
    "EpisodeJob",
    "EpisodeRunner",
    "FaultsConfig",
    "make_executor",
    "plan_jobs",
]

EXECUTORS = ("asyncio", "ray")
"""The executors ``FaultsConfig.executor`` can name."""

FATAL = (ModelNotAvailableError, ModelLoadError, ModelAuthError, RealModelCallBlockedError)
"""Errors no episode can survive: they end the benchmark instead of one episode."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FaultsConfig:
    """What one faults benchmark run covers.

    ``episodes`` per (profile, steps) cell: None takes every task of the split with that
    step count once; a number cycles through them with fresh fault seeds. ``step_slack``
    is how many steps beyond the ideal count every strategy may take. ``concurrency``
    bounds the episodes in flight: one event loop serves them all, and a saturated loop
    would add its own queueing to every latency measured. ``tool_timeout_s`` fixes every
    HTTP call's timeout, the same for every strategy (None: the tools' adaptive timeout,
    twice their latency tracker's p95, which a busy benchmark machine turns into spurious
    timeouts on a fast world).
    ``closed_loop`` picks the closed loop's planner: ``react`` (the model proposes every
    step), ``reference`` (the domain's reference agent: rules, the model past a gate) or
    ``auto`` (reference for real models, react for the test model).
    ``executor`` runs the episodes: ``asyncio`` (one event loop in this process) or
    ``ray`` (Ray tasks on a local Ray, or on the cluster at ``ray_address``).
    """

    model: str = "test:oracle"
    strategies: tuple[str, ...] = STRATEGY_NAMES
    profiles: tuple[str, ...] = ("seed000",)
    steps: tuple[int, ...] = tuple(range(1, 11))
    episodes: int | None = None
    split: str = "eval"
    # A JSONL file of the user's own tasks (closedloop_bench.reference.load_world_tasks),
    # run instead of the generated split.
    tasks: Path | None = None
    world_seed: int = 0
    seed: int = 0
    latency_scale: float = 1.0
    concurrency: int = 16
    attempts: int = 3
    backoff_s: float = 0.5
    step_slack: int = 3
    max_tokens: int = 384
    tool_timeout_s: float | None = 10.0
    closed_loop: str = "auto"
    cache: bool | str = True
    executor: str = "asyncio"
    ray_address: str | None = None
    quick: bool = False
    out: Path | None = None
    command: str = "closedloop bench faults"

    def __post_init__(self) -> None:
        if not self.strategies:
            raise ConfigurationError("strategies", self.strategies, "name at least one")
        for name in self.strategies:
            if name not in STRATEGY_NAMES:
                raise ConfigurationError("strategies", name, f"known: {', '.join(STRATEGY_NAMES)}")
        if not self.profiles:
            raise ConfigurationError("profiles", self.profiles, "name at least one")
        for profile in self.profiles:
            load_profile(profile)  # an unknown name or a bad file is refused before any episode
        for s in self.steps:
            if isinstance(s, bool) or not isinstance(s, int) or not 1 <= s <= 10:
                raise ConfigurationError("steps", s, "must be integers from 1 to 10")
        if not self.steps:
            raise ConfigurationError("steps", self.steps, "name at least one step count")
        if self.episodes is not None:
            require_int_at_least("episodes", self.episodes, 1)
        if self.split not in ("dev", "eval"):
            raise ConfigurationError("split", self.split, "must be 'dev' or 'eval'")
        require_non_negative("latency_scale", self.latency_scale)
        require_int_at_least("concurrency", self.concurrency, 1)
        require_int_at_least("attempts", self.attempts, 1)
        require_int_at_least("step_slack", self.step_slack, 0)
        if self.closed_loop not in ("auto", "react", "reference"):
            raise ConfigurationError(
                "closed_loop", self.closed_loop, "must be auto, react or reference"
            )
        if self.executor not in EXECUTORS:
            raise ConfigurationError("executor", self.executor, "must be 'asyncio' or 'ray'")
        if self.ray_address is not None and self.executor != "ray":
            raise ConfigurationError("ray_address", self.ray_address, "needs executor 'ray'")

    @classmethod
    def quick_preset(cls, **overrides: Any) -> FaultsConfig:
        """``--quick``: ``seed000``, steps 1, 3, 5 and 7. With the test model 3 episodes per
        cell; with a real one (whose calls dominate the time) 1 episode per cell and one
        step of slack instead of three. Any of these the overrides name (profiles, steps,
        episodes) replaces the preset's, so quick stays quick on what the caller asked."""
        test = str(overrides.get("model", "test:oracle")).startswith("test:")
        base: dict[str, Any] = {
            "profiles": ("seed000",),
            "steps": (1, 3, 5, 7),
            "episodes": 3 if test else 1,
            "step_slack": 3 if test else 1,
            "quick": True,
        }
        base.update(overrides)
        return cls(**base)

    def as_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["out"] = None if self.out is None else str(self.out)
        out["tasks"] = None if self.tasks is None else str(self.tasks)
        return out


@dataclass(frozen=True, slots=True)
class EpisodeJob:
    """One strategy on one episode: plain data, so any executor can ship it."""

    profile: str
    steps: int
    task_id: str
    repetition: int
    fault_seed: int
    strategy: str


def fault_seed(seed: int, profile: str, task_id: str, repetition: int) -> int:
    """A stable 31-bit fault seed per episode (the same for every strategy). ``profile`` is
    the profile's name (:func:`profile_key`), never a file's path."""
    text = f"{seed}\x1f{profile}\x1f{task_id}\x1f{repetition}".encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=4).digest(), "big") >> 1


def profile_key(profile: str) -> str:
    """What fault seeds are keyed by: the profile's name, so that a profile file draws the
    same faults from any directory it is named in (its name is the file's stem unless the
    file gives one), and a built-in or ``NAME@λ`` profile keeps its own."""
    return load_profile(profile).name


def _interleaved(tasks: Sequence[ReferenceTask], start: int = 0) -> list[ReferenceTask]:
    """Tasks by id within each domain, the domains taking turns from the ``start``-th (a
    few episodes per cell then cover the domains instead of the first alphabetically)."""
    by_domain: dict[str, list[ReferenceTask]] = {}
    for task in sorted(tasks, key=lambda t: t.id):
        by_domain.setdefault(task.domain, []).append(task)
    names = sorted(by_domain)
    turn = start % len(names) if names else 0
    queues = [by_domain[d] for d in names[turn:] + names[:turn]]
    out: list[ReferenceTask] = []
    for rank in range(max((len(q) for q in queues), default=0)):
        out.extend(q[rank] for q in queues if rank < len(q))
    return out


def plan_jobs(config: FaultsConfig, tasks: Sequence[ReferenceTask]) -> list[EpisodeJob]:
    """Every job of a run, episode by episode (all strategies of an episode together)."""
    jobs: list[EpisodeJob] = []
    for profile in config.profiles:
        key = profile_key(profile)
        for turn, steps in enumerate(config.steps):
            # Each step count starts with another domain, so one episode per cell still
            # samples every domain across the curve.
            pool = _interleaved([t for t in tasks if t.expected_steps == steps], start=turn)
            if not pool:
                continue
            count = len(pool) if config.episodes is None else config.episodes
            for n in range(count):
                task, repetition = pool[n % len(pool)], n // len(pool)
                seed = fault_seed(config.seed, key, task.id, repetition)
                for name in config.strategies:
                    jobs.append(EpisodeJob(profile, steps, task.id, repetition, seed, name))
    return jobs


class EpisodeExecutor(Protocol):
    """Runs jobs and returns their results in job order."""

    async def map(
        self,
        run: Callable[[EpisodeJob], Awaitable[EpisodeResult]],
        jobs: Sequence[EpisodeJob],
    ) -> list[EpisodeResult]: ...


class AsyncioExecutor:
    """Up to ``concurrency`` jobs at once on the running event loop."""

    name = "asyncio"

    def __init__(self, concurrency: int = 16) -> None:
        self.concurrency = require_int_at_least("concurrency", concurrency, 1)

    async def map(
        self,
        run: Callable[[EpisodeJob], Awaitable[EpisodeResult]],
        jobs: Sequence[EpisodeJob],
    ) -> list[EpisodeResult]:
        gate = asyncio.Semaphore(self.concurrency)

        async def one(job: EpisodeJob) -> EpisodeResult:
            async with gate:
                return await run(job)

        return list(await asyncio.gather(*(one(job) for job in jobs)))


TraceFactory = Callable[[EpisodeJob, World], TraceSink | None]
"""Gives a job a trace sink; it gets the episode's world too, whose clock times its logs."""


@dataclass(slots=True)
class EpisodeRunner:
    """Runs single jobs: leases a world, builds tools and model, runs, judges.

    ``sleep`` performs every backoff and injected latency (a fake one in tests);
    ``timer`` times episodes; ``traces`` may give closed-loop jobs a trace sink.
    """

    config: FaultsConfig
    source: ModelSource
    tasks: dict[str, ReferenceTask]
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    timer: Callable[[], float] = time.perf_counter
    traces: TraceFactory | None = None
    on_result: Callable[[EpisodeResult], None] | None = None
    strategies: dict[str, BenchStrategy] = field(default_factory=dict)
    farms: dict[str, WorldFarm] = field(default_factory=dict)

    def strategy(self, name: str) -> BenchStrategy:
        found = self.strategies.get(name)
        if found is None:
            found = self.strategies[name] = get_strategy(name, planner=self.config.closed_loop)
        return found

    def limits(self, task: ReferenceTask) -> Limits:
        c = self.config
        return Limits(
            max_steps=task.expected_steps + c.step_slack,
            attempts=c.attempts,
            backoff_s=c.backoff_s,
            max_tokens=c.max_tokens,
            no_progress=task.expected_steps + 1,
        )

    async def __call__(self, job: EpisodeJob) -> EpisodeResult:
        task = self.tasks[job.task_id]
        farm = self.farms[job.profile]
        async with farm.lease(job.fault_seed) as lease:
            store = MemoryStore()
            async with WorldTools(
                lease.base_url,
                store=store,
                journal_size=4096,
                timeout_s=self.config.tool_timeout_s,
            ) as tools:
                meter = MeteredModel(await self.source.for_episode(task, tools), clock=self.timer)
                episode = Episode(
                    task=task,
                    tools=tools,
                    model=meter,
                    limits=self.limits(task),
                    store=store,
                    sleep=self.sleep,
                    trace=None if self.traces is None else self.traces(job, lease.world),
                    test_model=self.source.deterministic,
                )
                started = self.timer()
                try:
                    outcome = await self.strategy(job.strategy).run(episode)
                except FATAL:
                    raise
                except Exception as exc:  # a strategy's crash is its episode's failure
                    error = f"{type(exc).__name__}: {exc}"
                    outcome = Outcome(answer=Answer(), halt="error", steps=0, error=error)
                wall = self.timer() - started
            result = self._judge(job, task, lease.world, outcome, meter, wall)
        if self.on_result is not None:
            self.on_result(result)
        return result

    def _judge(
        self,
        job: EpisodeJob,
        task: ReferenceTask,
        world: Any,
        outcome: Outcome,
        meter: MeteredModel,
        wall: float,
    ) -> EpisodeResult:
        verdict = check(task, outcome.answer, world)
        oracle = oracle_verdict(task, world.planner, self.config.attempts)
        tally = meter
        return EpisodeResult(
            strategy=job.strategy,
            profile=job.profile,
            steps=job.steps,
            task_id=task.id,
            domain=task.domain,
            template=task.template,
            impossible=task.impossible,
            repetition=job.repetition,
            fault_seed=job.fault_seed,
            success=verdict.success,
            reason=verdict.reason,
            halt=outcome.halt,
            loop_steps=outcome.steps,
            handed_over=outcome.handed_over,
            handover_justified=handover_justified(
                handed_over=outcome.handed_over,
                impossible=task.impossible,
                solvable=oracle.solvable,
            ),
            oracle_solvable=oracle.solvable,
            model_calls=tally.calls,
            prompt_tokens=tally.prompt_tokens,
            completion_tokens=tally.completion_tokens,
            latency_s=max(0.0, wall - tally.waited_s + tally.charged_s),
            wall_s=wall,
            requests=sum(world.request_counts().values()),
            faults=fault_summary(world.fault_log()),
            duplicate_effects=sum(c.duplicates for c in world.counters().values()),
            warned_early=outcome.warned_early,
            regime_changes=[
                change.model_dump(mode="json")
                for change in getattr(world, "regime_changes", tuple)()
            ],
            planner=outcome.planner,
            error=outcome.error,
        )


def load_split(config: FaultsConfig) -> dict[str, ReferenceTask]:
    """The split's tasks by id (the task file's, when ``config.tasks`` names one)."""
    if config.tasks is not None:
        tasks = load_world_tasks(config.tasks, world_seed=config.world_seed)
        return {t.id: t for t in tasks}
    tasks = load_tasks("eval" if config.split == "eval" else "dev", config.world_seed)
    return {t.id: t for t in tasks}


async def run_jobs(
    config: FaultsConfig,
    jobs: Sequence[EpisodeJob],
    runner: EpisodeRunner,
    executor: EpisodeExecutor | None = None,
) -> list[EpisodeResult]:
    """Run ``jobs`` profile by profile, each profile on a farm of its own worlds.

    Without ``executor``, the one ``config.executor`` names runs them (and is closed
    after). An executor whose ``serves_worlds`` is true brings its own worlds.
    """
    if executor is not None:
        return await _run_profiles(config, jobs, runner, executor)
    chosen = make_executor(config)
    try:
        return await _run_profiles(config, jobs, runner, chosen)
    finally:
        close = getattr(chosen, "close", None)
        if close is not None:
            close()


async def _run_profiles(
    config: FaultsConfig,
    jobs: Sequence[EpisodeJob],
    runner: EpisodeRunner,
    chosen: EpisodeExecutor,
) -> list[EpisodeResult]:
    if getattr(chosen, "serves_worlds", False):  # every profile's jobs at once
        return await chosen.map(
            runner, [j for p in config.profiles for j in jobs if j.profile == p]
        )
    results: list[EpisodeResult] = []
    for profile in config.profiles:
        mine = [j for j in jobs if j.profile == profile]
        if not mine:
            continue
        size = min(len(mine), config.concurrency)
        async with WorldFarm(
            profile,
            seed=config.world_seed,
            size=size,
            latency_scale=config.latency_scale,
            sleep=runner.sleep,
        ) as farm:
            runner.farms[profile] = farm
            try:
                results.extend(await chosen.map(runner, mine))
            finally:
                runner.farms.pop(profile, None)
    return results


def make_executor(config: FaultsConfig) -> EpisodeExecutor:
    """The executor ``config.executor`` names (Ray is imported only when asked for)."""
    if config.executor == "ray":
        from ._ray import RayExecutor  # ray is an optional extra: imported on demand

        return RayExecutor(config.ray_address)
    return AsyncioExecutor(config.concurrency)


def make_runner(
    config: FaultsConfig,
    *,
    source: ModelSource | None = None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    traces: TraceFactory | None = None,
    on_result: Callable[[EpisodeResult], None] | None = None,
) -> EpisodeRunner:
    """A runner for ``config`` (its model source built from ``config.model`` if not given)."""
    chosen = source if source is not None else model_source(config.model, cache=config.cache)
    return EpisodeRunner(
        config=config,
        source=chosen,
        tasks=load_split(config),
        sleep=sleep,
        traces=traces,
        on_result=on_result,
    )
