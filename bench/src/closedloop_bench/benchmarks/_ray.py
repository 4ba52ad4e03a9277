"""Benchmark episodes as Ray tasks: a local Ray by default, an existing cluster by address.

Every strategy of one episode runs in one Ray task (their identical first model calls
still meet in one process's completion cache). A task gets plain data (the
``FaultsConfig``, the loaded ``WorldFaultProfile`` and its jobs) and rebuilds the rest in its
worker process, once per worker: an event loop, an :class:`EpisodeRunner` and a
``WorldFarm`` per profile, served on the worker's own 127.0.0.1. Nothing of the driver
has to be reachable from the nodes, and an episode meets exactly the faults it meets
locally (they are a function of the fault seed and the request index, not of where the
world runs). The driver judges nothing; it collects the rows in job order and reports
progress as they arrive.

A task that fails (an exception in the worker, a dead worker, a lost object) becomes a
failed episode with the error recorded; the oracle bound of that episode is still
computed from its fault seed. Only the errors no episode survives (the model is missing,
its credentials are refused, ...) end the benchmark, as they do locally.

:meth:`RayExecutor.run_refine` does the same for the refine benchmark: one Ray task per
code task (round 1 and every strategy), each worker loading the model once.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from closedloop._exceptions import ConfigurationError
from closedloop._validation import require_int_at_least, require_positive

from ..world import FaultPlanner, WorldFaultProfile, load_profile
from ._oracle import oracle_verdict
from ._report import EpisodeResult
from ._runner import FATAL, EpisodeJob, EpisodeRunner, FaultsConfig, make_runner
from ._worlds import WorldFarm

if TYPE_CHECKING:
    from closedloop.harness import BenchConfig, BenchReport, CodeTask
    from closedloop.models import Model

__all__ = ["RayExecutor"]

_OBJECT_STORE_BYTES = 100 * 1024 * 1024
"""A local Ray's object store: rows are a few KB, so the minimum Ray allows is plenty."""


def _import_ray() -> Any:
    try:
        return importlib.import_module("ray")
    except ImportError:
        raise ConfigurationError(
            "executor", "ray", "needs Ray: install the 'ray' extra (pip install 'closedloop[ray]')"
        ) from None


# --- the worker side -------------------------------------------------------------------


@dataclass(slots=True)
class _Worker:
    """What one Ray worker process keeps between tasks (its loop, runners and worlds)."""

    loop: asyncio.AbstractEventLoop = field(default_factory=asyncio.new_event_loop)
    runners: dict[FaultsConfig, EpisodeRunner] = field(default_factory=dict)
    farms: dict[tuple[FaultsConfig, str], WorldFarm] = field(default_factory=dict)
    models: dict[str, Model] = field(default_factory=dict)

    async def run(
        self, config: FaultsConfig, profile: WorldFaultProfile, jobs: Sequence[EpisodeJob]
    ) -> tuple[list[dict[str, Any]], dict[str, int]]:
        runner = self.runners.get(config)
        if runner is None:
            runner = self.runners[config] = make_runner(config)
        name = jobs[0].profile
        farm = self.farms.get((config, name))
        if farm is None:
            farm = WorldFarm(
                profile,
                seed=config.world_seed,
                size=len(config.strategies),
                latency_scale=config.latency_scale,
            )
            await farm.__aenter__()
            self.farms[(config, name)] = farm
        runner.farms[name] = farm
        cache = runner.source.cache
        before = cache.stats.as_dict() if cache is not None else {}
        # Leases wait while every world is busy, so the farm's size bounds concurrency.
        rows = await asyncio.gather(*(runner(job) for job in jobs))
        after = cache.stats.as_dict() if cache is not None else {}
        spent = {k: after[k] - before.get(k, 0) for k in after}
        return [row.model_dump(mode="json") for row in rows], spent


_WORKER: _Worker | None = None


def _run_episode(
    config: FaultsConfig, profile: WorldFaultProfile, jobs: tuple[EpisodeJob, ...]
) -> dict[str, Any]:
    """The Ray task: one episode's jobs on this worker's runner and worlds.

    Returns ``{"rows": [...], "cache": {...}}``, or ``{"error": "..."}`` when the worker
    could not run them: the error travels as text, as not every exception unpickles
    (``ConfigurationError`` takes three arguments). Fatal errors still raise.
    """
    global _WORKER
    try:
        if _WORKER is None:
            _WORKER = _Worker()
        rows, spent = _WORKER.loop.run_until_complete(_WORKER.run(config, profile, jobs))
    except FATAL:
        raise
    except Exception as exc:
        return {"error": _describe(exc)}
    return {"rows": rows, "cache": spent}


def _refine_task(
    config: BenchConfig, task: CodeTask, factory: Callable[[], Model] | None
) -> dict[str, Any]:
    """The Ray task of the refine benchmark: round 1 and every strategy on one task.

    ``{"report": BenchReport}``, or ``{"error": "..."}`` (as in :func:`_run_episode`).
    """
    from closedloop.harness import run_refine_bench
    from closedloop.models import load_model

    global _WORKER
    try:
        if _WORKER is None:
            _WORKER = _Worker()
        # Loaded once per worker: a local model takes seconds to load.
        model = _WORKER.models.get(config.model) if factory is None else factory()
        if model is None:
            options = {} if config.threads is None else {"n_threads": config.threads}
            model = _WORKER.models[config.model] = load_model(config.model, **options)
        # The driver already picked this task (shard included) and writes the outputs.
        alone = dataclasses.replace(config, out=None, shard=None)
        run = run_refine_bench(alone, model=model, tasks=[task])
        return {"report": _WORKER.loop.run_until_complete(run)}
    except FATAL:
        raise
    except Exception as exc:
        return {"error": _describe(exc)}


# --- the driver side -------------------------------------------------------------------


def _describe(exc: BaseException) -> str:
    cause = getattr(exc, "cause", None)
    shown = cause if isinstance(cause, BaseException) else exc
    first = (str(shown).strip().splitlines() or [""])[0]
    text = f"{type(shown).__name__}: {first}" if first else type(shown).__name__
    return f"ray task failed: {text}"[:500]


def _failed_row(
    runner: EpisodeRunner, profile: WorldFaultProfile, job: EpisodeJob, error: str
) -> EpisodeResult:
    """The row of an episode whose task never came back: failed, the error recorded."""
    task = runner.tasks.get(job.task_id)
    solvable = False
    if task is not None:
        planner = FaultPlanner(profile, job.fault_seed)
        solvable = oracle_verdict(task, planner, runner.config.attempts).solvable
    return EpisodeResult(
        strategy=job.strategy,
        profile=job.profile,
        steps=job.steps,
        task_id=job.task_id,
        domain="" if task is None else task.domain,
        template="" if task is None else task.template,
        impossible=False if task is None else task.impossible,
        repetition=job.repetition,
        fault_seed=job.fault_seed,
        success=False,
        reason="the episode's Ray task failed",
        halt="error",
        loop_steps=0,
        handed_over=False,
        oracle_solvable=solvable,
        model_calls=0,
        prompt_tokens=0,
        completion_tokens=0,
        latency_s=0.0,
        wall_s=0.0,
        requests=0,
        error=error,
    )


def _episodes(jobs: Sequence[EpisodeJob]) -> list[list[int]]:
    """Job indices grouped by episode (profile, task, repetition), in first-seen order."""
    groups: dict[tuple[str, str, int, int], list[int]] = {}
    for n, job in enumerate(jobs):
        key = (job.profile, job.task_id, job.repetition, job.fault_seed)
        groups.setdefault(key, []).append(n)
    return list(groups.values())


class RayExecutor:
    """Runs each episode (all its strategies) as one Ray task.

    ``address`` None starts a local Ray (``num_cpus`` CPUs, all by default; no
    dashboard; a 100 MB object store) on first use and shuts it down on :meth:`close`.
    An address (``"auto"``, ``"10.0.0.5:6379"``, ``"ray://head:10001"``) connects to an
    existing cluster, which :meth:`close` leaves running; so does a Ray this process had
    already initialised. Every node needs closedloop installed (the same version), or
    ``runtime_env={"py_modules": [closedloop]}`` ships it. ``task_cpus`` is what one
    episode task reserves (below 1 runs more episodes per core: they mostly wait on the
    world). ``max_retries`` re-runs a task whose worker died.

    Ray decides how many episodes run at once (one per ``task_cpus`` free), not
    ``FaultsConfig.concurrency``. Workers use real sleeps and timers: a ``sleep``
    injected into the driver's runner stays in the driver. Per-episode results equal
    the asyncio executor's for the same seeds; wall times and latencies do not.
    """

    name = "ray"
    serves_worlds = True
    """Its tasks serve their own worlds: ``run_jobs`` starts no farm for it."""

    def __init__(
        self,
        address: str | None = None,
        *,
        num_cpus: int | None = None,
        task_cpus: float = 1.0,
        max_retries: int = 0,
        runtime_env: Mapping[str, Any] | None = None,
        init_options: Mapping[str, Any] | None = None,
    ) -> None:
        if address is not None and (not isinstance(address, str) or not address.strip()):
            raise ConfigurationError("address", address, "must be a Ray address or None")
        if num_cpus is not None:
            require_int_at_least("num_cpus", num_cpus, 1)
            if address is not None:
                raise ConfigurationError("num_cpus", num_cpus, "only for a local Ray (no address)")
        self.address = address
        self.num_cpus = num_cpus
        self.task_cpus = require_positive("task_cpus", task_cpus)
        self.max_retries = require_int_at_least("max_retries", max_retries, 0)
        self.runtime_env = dict(runtime_env) if runtime_env is not None else None
        self.init_options = dict(init_options or {})
        self._ray: Any = None
        self._remote: Any = None
        self._owns_ray = False

    def __repr__(self) -> str:
        where = self.address or "local"
        return f"RayExecutor({where!r}, started={self._ray is not None})"

    def start(self) -> None:
        """Connect to Ray (starting a local one when there is no address and none runs)."""
        if self._ray is not None:
            return
        ray = _import_ray()
        if not ray.is_initialized():
            options: dict[str, Any] = {
                "log_to_driver": False,
                "ignore_reinit_error": True,
                "include_dashboard": False,
            }
            if self.runtime_env is not None:
                options["runtime_env"] = self.runtime_env
            if self.address is None:
                options["num_cpus"] = self.num_cpus
                options["object_store_memory"] = _OBJECT_STORE_BYTES
            else:
                options["address"] = self.address
                # a cluster has its own dashboard and store; these are local-only options
                del options["include_dashboard"]
            options.update(self.init_options)
            try:
                ray.init(**options)
            except ConnectionError as exc:
                raise ConfigurationError("ray_address", self.address, str(exc)) from exc
            self._owns_ray = self.address is None
        self._ray = ray
        self._remote = ray.remote(_run_episode).options(
            num_cpus=self.task_cpus, max_retries=self.max_retries
        )

    def close(self) -> None:
        """Shut down the local Ray this executor started; leave any other running."""
        if self._ray is not None and self._owns_ray:
            self._ray.shutdown()
        self._ray = self._remote = None
        self._owns_ray = False

    def __enter__(self) -> RayExecutor:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def map(
        self,
        run: Callable[[EpisodeJob], Awaitable[EpisodeResult]],
        jobs: Sequence[EpisodeJob],
    ) -> list[EpisodeResult]:
        """Run ``jobs`` as Ray tasks (one per episode); rows in job order."""
        if not isinstance(run, EpisodeRunner):
            raise ConfigurationError(
                "run", type(run).__name__, "the Ray executor needs an EpisodeRunner"
            )
        if run.traces is not None:
            raise ConfigurationError("traces", run.traces, "traces do not cross to Ray workers")
        if not jobs:
            return []
        self.start()
        # Profiles are loaded here, so a profile file need only exist on the driver.
        profiles = {name: load_profile(name) for name in dict.fromkeys(j.profile for j in jobs)}
        rows: list[EpisodeResult | None] = [None] * len(jobs)
        groups = _episodes(jobs)
        refs = [
            self._remote.remote(run.config, profiles[jobs[g[0]].profile], tuple(jobs[n] for n in g))
            for g in groups
        ]

        async def collect(group: list[int], ref: Any) -> None:
            try:
                payload: dict[str, Any] = await ref
            except Exception as exc:  # a failed task is its episodes' failure...
                cause = getattr(exc, "cause", None)
                if isinstance(cause, FATAL):  # ...unless no episode could survive it
                    raise cause from None
                if isinstance(exc, FATAL):
                    raise
                payload = {"error": _describe(exc)}
            if "error" in payload:
                found = [
                    _failed_row(run, profiles[jobs[n].profile], jobs[n], payload["error"])
                    for n in group
                ]
            else:
                found = [EpisodeResult.model_validate(p) for p in payload["rows"]]
                _count(run, payload["cache"])
            for n, row in zip(group, found, strict=True):
                rows[n] = row
                if run.on_result is not None:
                    run.on_result(row)

        try:
            await asyncio.gather(*(collect(g, r) for g, r in zip(groups, refs, strict=True)))
        except BaseException:
            for ref in refs:
                try:
                    self._ray.cancel(ref)
                except Exception:  # already finished or gone: nothing to stop
                    continue
            raise
        done = [row for row in rows if row is not None]
        assert len(done) == len(jobs)  # every group fills its rows or raises
        return done

    async def run_refine(
        self,
        config: BenchConfig,
        tasks: Sequence[CodeTask],
        *,
        model_factory: Callable[[], Model] | None = None,
        progress: Callable[[str], None] | None = None,
    ) -> BenchReport:
        """The refine benchmark with each task (round 1 and every strategy) as one Ray task.

        Every worker loads ``config.model`` once, or calls ``model_factory`` (a picklable
        callable; model objects hold locks and do not travel) for each task. Parts merge
        in task order, as a local run's rows; a task whose Ray task failed counts as no
        round for every strategy, its error in ``stop_detail``. ``wall_s`` and the
        output files are the caller's (``run_refine_bench(..., executor=...)``).
        """
        return await _run_refine(self, config, tasks, factory=model_factory, progress=progress)


def _count(runner: EpisodeRunner, spent: Mapping[str, int]) -> None:
    """Adds a task's cache hits and misses to the driver's figures (the report's)."""
    cache = runner.source.cache
    if cache is None:
        return
    for name, count in spent.items():
        for _ in range(max(0, count)):
            cache.stats.add(name)


def _failed_refine(
    config: BenchConfig, task: CodeTask, names: Sequence[str], error: str
) -> BenchReport:
    """One task's report when its Ray task failed: every strategy ran no round."""
    from closedloop.harness import BenchReport
    from closedloop.harness._results import RefinementResult

    report = BenchReport(config=config, tasks=[task.name])
    for name in names:
        failed = RefinementResult(
            task=task.name,
            strategy=name,
            target=1.0,
            rounds=(),
            best_round=0,
            best_code="",
            best_score=0.0,
            stop_reason="error",
            stop_detail=error,
        )
        report.runs[name] = [failed]
    return report


async def _run_refine(
    executor: RayExecutor,
    config: BenchConfig,
    tasks: Sequence[CodeTask],
    *,
    factory: Callable[[], Model] | None = None,
    progress: Callable[[str], None] | None = None,
) -> BenchReport:
    """See :meth:`RayExecutor.run_refine`."""
    from closedloop.harness import BenchReport
    from closedloop.harness._auto import strategy_from_spec

    executor.start()
    say = progress or (lambda _msg: None)
    remote = executor._ray.remote(_refine_task).options(
        num_cpus=executor.task_cpus, max_retries=executor.max_retries
    )
    try:
        shipped = executor._ray.put(factory) if factory is not None else None
    except Exception as exc:  # whatever pickling raised, the factory is the cause
        reason = f"cannot be sent to Ray workers: {str(exc).strip().splitlines()[0]}"
        raise ConfigurationError("model_factory", factory, reason) from exc
    refs = [remote.remote(config, task, shipped) for task in tasks]
    names = [strategy_from_spec(spec).name for spec in config.strategies]
    parts: list[BenchReport | None] = [None] * len(tasks)

    async def collect(n: int, ref: Any) -> None:
        try:
            payload: dict[str, Any] = await ref
        except Exception as exc:  # a failed task is that task's failure
            cause = getattr(exc, "cause", None)
            if isinstance(cause, FATAL):
                raise cause from None
            if isinstance(exc, FATAL):
                raise
            payload = {"error": _describe(exc)}
        if "error" in payload:
            part = _failed_refine(config, tasks[n], names, payload["error"])
        else:
            part = payload["report"]
        parts[n] = part
        scores = ", ".join(
            f"{name} {runs[0].best_score:.2f}" for name, runs in part.runs.items() if runs
        )
        say(f"[{sum(p is not None for p in parts)}/{len(tasks)}] {tasks[n].name}: {scores}")

    try:
        await asyncio.gather(*(collect(n, ref) for n, ref in enumerate(refs)))
    except BaseException:
        for ref in refs:
            try:
                executor._ray.cancel(ref)
            except Exception:  # already finished or gone: nothing to stop
                continue
        raise
    report = BenchReport(config=config, tasks=[t.name for t in tasks])
    for part in parts:
        assert part is not None  # every task fills its part or raises
        for name, runs in part.runs.items():
            report.runs.setdefault(name, []).extend(runs)
        for name, runs in part.stop_runs.items():
            report.stop_runs.setdefault(name, []).extend(runs)
        report.model_calls += part.model_calls
        report.cache_hits += part.cache_hits
        report.loopgain_note = report.loopgain_note or part.loopgain_note
    return report
