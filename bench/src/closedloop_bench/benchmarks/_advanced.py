"""The advanced-control benchmark: every part beside plain closedloop.

``run_advanced_bench(AdvancedConfig(...))``:

1. tunes gains per domain on the development split (coordinate search over live
   ``test:oracle`` episodes under ``tune_profile``; :func:`closedloop.control.tune_gains`),
   builds the k-NN gain predictor from the same episodes and keeps it only if its
   leave-one-out success on the dev split beats the table's;
2. runs, per fault profile, the same evaluation-split tasks and fault seeds with the plain
   configuration and every variant (gain table, gain predictor, pre-warm, tiered response,
   pre-warm + tiered) side by side;
3. reports per variant success, model calls, tokens, tool requests, latency and first-step
   error next to the plain row, the spread of success across domains (std and max−min)
   with fixed gains, the table and the predictor, success and compute per response level,
   and how well the plain view's risk score separates failed from successful runs.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from closedloop._exceptions import ConfigurationError
from closedloop._validation import require_int_at_least, require_non_negative, require_unit_interval
from closedloop.agent._prewarm import query_features
from closedloop.control import GainPredictor, Gains, GainTable, TuningResult, tune_gains

from ..reference import ReferenceTask
from ._advanced_parts import (
    DOMAINS,
    Extras,
    GainVariant,
    PlainVariant,
    PrewarmVariant,
    TeamVariant,
    TieredVariant,
)
from ._advanced_report import (
    PLAIN,
    AdvancedReport,
    AdvancedRow,
    _levels,
    _plain_figures,
    _row,
    _spread,
    render_advanced,
)
from ._runner import (
    EpisodeJob,
    EpisodeRunner,
    FaultsConfig,
    fault_seed,
    make_runner,
    profile_key,
    run_jobs,
)
from ._testmodel import IdealReference

__all__ = ["AdvancedConfig", "AdvancedReport", "render_advanced", "run_advanced_bench"]

Sleep = Callable[[float], Awaitable[None]]


@dataclass(frozen=True, slots=True, kw_only=True)
class AdvancedConfig:
    """What one run covers; ``*_per_domain`` bound the tasks per domain and split."""

    profiles: tuple[str, ...] = ("seed000", "harsh")
    tune_profile: str = "harsh"
    tune_per_domain: int = 16
    min_tune_episodes: int = 8
    eval_per_domain: int = 30
    team_tasks: int = 40
    passes: int = 1
    warn: float = 0.2
    seed: int = 0
    world_seed: int = 0
    concurrency: int = 16
    latency_scale: float = 0.05
    k: int = 5
    out: Path | None = None

    def __post_init__(self) -> None:
        require_int_at_least("tune_per_domain", self.tune_per_domain, 0)
        require_int_at_least("min_tune_episodes", self.min_tune_episodes, 1)
        require_int_at_least("eval_per_domain", self.eval_per_domain, 1)
        require_int_at_least("team_tasks", self.team_tasks, 0)
        require_int_at_least("passes", self.passes, 1)
        require_unit_interval("warn", self.warn)
        require_non_negative("latency_scale", self.latency_scale)
        require_int_at_least("k", self.k, 1)
        if not self.profiles:
            raise ConfigurationError("profiles", self.profiles, "name at least one")


def _pick(tasks: Sequence[ReferenceTask], per_domain: int) -> list[ReferenceTask]:
    """Up to ``per_domain`` tasks of each domain, spread over the step counts."""
    out: list[ReferenceTask] = []
    for domain in DOMAINS:
        mine = sorted((t for t in tasks if t.domain == domain), key=lambda t: t.id)
        if not mine:
            continue
        stride = max(1, len(mine) // max(1, per_domain))
        out.extend(mine[::stride][:per_domain])
    return out


def _jobs(
    profile: str, tasks: Sequence[ReferenceTask], names: Sequence[str], seed: int
) -> list[EpisodeJob]:
    jobs: list[EpisodeJob] = []
    key = profile_key(profile)
    for task in tasks:
        fs = fault_seed(seed, key, task.id, 0)
        jobs.extend(EpisodeJob(profile, task.expected_steps, task.id, 0, fs, n) for n in names)
    return jobs


def _runner(
    config: AdvancedConfig, profile: str, split: str, sleep: Sleep
) -> tuple[FaultsConfig, EpisodeRunner]:
    faults = FaultsConfig(
        model="test:oracle",
        strategies=("closedloop_adrc",),
        profiles=(profile,),
        split=split,
        world_seed=config.world_seed,
        seed=config.seed,
        latency_scale=config.latency_scale,
        concurrency=config.concurrency,
        closed_loop="react",
        cache=False,
    )
    return faults, make_runner(faults, sleep=sleep)


class _Tuner:
    """Scores gain candidates on live dev episodes (one batch per coordinate step)."""

    def __init__(self, config: AdvancedConfig, sleep: Sleep) -> None:
        self.config = config
        self.faults, self.runner = _runner(config, config.tune_profile, "dev", sleep)
        self.tasks = _pick(list(self.runner.tasks.values()), config.tune_per_domain)
        self.extras = Extras()
        self.names: dict[Gains, str] = {}
        self.per_episode: dict[Gains, dict[str, float]] = {}

    def name(self, gains: Gains) -> str:
        found = self.names.get(gains)
        if found is None:
            found = self.names[gains] = f"gains{len(self.names)}"
            table = GainTable({"default": gains}, created_at=0.0)
            self.runner.strategies[found] = GainVariant(found, self.extras, table)
        return found

    async def scores(self, asked: Mapping[str, Sequence[Gains]]) -> dict[str, list[float]]:
        jobs: list[EpisodeJob] = []
        for domain, candidates in asked.items():
            names = [self.name(g) for g in candidates if g not in self.per_episode]
            mine = [t for t in self.tasks if t.domain == domain]
            jobs.extend(_jobs(self.config.tune_profile, mine, names, self.config.seed))
        results = await run_jobs(self.faults, jobs, self.runner)
        by_name = {v: k for k, v in self.names.items()}
        for r in results:
            self.per_episode.setdefault(by_name[r.strategy], {})[r.task_id] = float(r.success)
        out: dict[str, list[float]] = {}
        for domain, candidates in asked.items():
            ids = [t.id for t in self.tasks if t.domain == domain]
            out[domain] = [
                sum(self.per_episode[g].get(i, 0.0) for i in ids) / max(1, len(ids))
                for g in candidates
            ]
        return out

    def predictor(self, candidates: Sequence[Gains], fixed: Gains) -> GainPredictor:
        points = [_features(t) for t in self.tasks]
        scores = [[self.per_episode[g].get(t.id, 0.0) for g in candidates] for t in self.tasks]
        return GainPredictor(
            tuple(candidates),
            tuple(points),
            tuple(tuple(s) for s in scores),
            fixed,
            time.time(),
            self.config.k,
            "k-NN over dev-split episodes",
        )


def _features(task: ReferenceTask) -> tuple[float, ...]:
    return query_features(task.prompt, task.domain, DOMAINS)


def _loo_success(predictor: GainPredictor, tasks: Sequence[ReferenceTask]) -> float:
    """The predictor's dev success with each episode left out of its own vote."""
    hits = 0.0
    for i in range(len(tasks)):
        rest = [j for j in range(len(tasks)) if j != i]
        if not rest:
            return 0.0
        loo = GainPredictor(
            predictor.candidates,
            tuple(predictor.points[j] for j in rest),
            tuple(predictor.scores[j] for j in rest),
            predictor.fallback,
            predictor.created_at,
            predictor.k,
        )
        pick = predictor.candidates.index(loo.predict(predictor.points[i]))
        hits += predictor.scores[i][pick]
    return hits / max(1, len(tasks))


async def _tune(
    config: AdvancedConfig, fixed: Gains, sleep: Sleep
) -> tuple[TuningResult, GainPredictor | None, dict[str, Any]]:
    tuner = _Tuner(config, sleep)
    domains = sorted({t.domain for t in tuner.tasks})
    per_domain = min((sum(1 for t in tuner.tasks if t.domain == d) for d in domains), default=0)
    result = await tune_gains(
        domains or list(DOMAINS),
        tuner.scores,
        fixed=fixed,
        episodes=per_domain,
        created_at=time.time(),
        min_episodes=config.min_tune_episodes,
        passes=config.passes,
    )
    info: dict[str, Any] = {
        "changed": result.changed,
        "message": result.message,
        "episodes_per_domain": per_domain,
        "evaluations": result.evaluations,
        "episodes_used": result.episodes_used,
        "fixed_dev_success": dict(result.fixed_scores),
        "tuned_dev_success": dict(result.best_scores),
    }
    if result.table is None or not result.changed:
        return result, None, info
    info["table"] = {k: v.as_dict() for k, v in result.table.rows.items()}
    candidates = list(dict.fromkeys([fixed, *result.table.rows.values()]))
    for alt in (Gains(kp=0.3, ki=0.0, kd=0.0), Gains(kp=1.6, ki=0.2, kd=0.8, eso_window=6)):
        if alt not in candidates:
            candidates.append(alt)
    await tuner.scores({d: candidates for d in domains})
    predictor = tuner.predictor(candidates, fixed)
    table_dev = statistics.fmean(
        tuner.per_episode[result.table.gains_for(t.domain)[0]].get(t.id, 0.0) for t in tuner.tasks
    )
    predictor_dev = _loo_success(predictor, tuner.tasks)
    keep = predictor_dev > table_dev
    info.update(
        predictor_candidates=len(candidates),
        table_dev_success=table_dev,
        predictor_dev_success_loo=predictor_dev,
        predictor_kept=keep,
    )
    return result, predictor, info


async def run_advanced_bench(
    config: AdvancedConfig | None = None, *, sleep: Sleep = asyncio.sleep
) -> AdvancedReport:
    """Run the whole benchmark (see the module); writes ``config.out`` when given.
    ``sleep`` performs every backoff and injected latency (a fake one in tests)."""
    cfg = config or AdvancedConfig()
    started = time.perf_counter()
    fixed = Gains()
    tuning, predictor, info = await _tune(cfg, fixed, sleep)
    reference = IdealReference()
    rows: list[AdvancedRow] = []
    spread: dict[str, dict[str, Any]] = {}
    levels: list[dict[str, Any]] = []
    figures: dict[str, Any] = {}
    for profile in cfg.profiles:
        faults, runner = _runner(cfg, profile, "eval", sleep)
        extras = Extras()
        variants: dict[str, Any] = {PLAIN: PlainVariant(PLAIN, extras)}
        if tuning.table is not None:
            variants["gain_table"] = GainVariant("gain_table", extras, tuning.table)
        if predictor is not None:
            variants["gain_predictor"] = GainVariant("gain_predictor", extras, predictor)
        variants["prewarm"] = PrewarmVariant("prewarm", extras)
        variants["tiered"] = TieredVariant("tiered", extras, warn=cfg.warn, prewarmed=False)
        variants["prewarm+tiered"] = TieredVariant(
            "prewarm+tiered", extras, warn=cfg.warn, prewarmed=True
        )
        runner.strategies.update(variants)
        tasks = _pick(list(runner.tasks.values()), cfg.eval_per_domain)
        results = await run_jobs(faults, _jobs(profile, tasks, list(variants), cfg.seed), runner)
        parts = {
            "gain_table": "adaptive gains",
            "gain_predictor": "adaptive gains",
            "prewarm": "pre-warm",
            "tiered": "tiered response",
            "prewarm+tiered": "tiered response",
        }
        for name in variants:
            if name != PLAIN:
                rows.append(_row(parts[name], name, profile, results, extras))
        for name in (PLAIN, "gain_table", "gain_predictor"):
            if name in variants:
                label = "fixed" if name == PLAIN else name.removeprefix("gain_")
                spread[f"{profile}:{label}"] = _spread(results, name)
        levels.extend(_levels(results, extras, profile))
        figures[profile] = _plain_figures(results, extras)
        if cfg.team_tasks:
            rows.extend(await _team_rows(cfg, profile, sleep, reference))
    report = AdvancedReport(
        config={k: str(v) if isinstance(v, Path) else v for k, v in _asdict(cfg).items()},
        tuning=info,
        rows=rows,
        spread=spread,
        levels=levels,
        plain_view=figures,
        wall_s=time.perf_counter() - started,
    )
    if cfg.out is not None:
        cfg.out.parent.mkdir(parents=True, exist_ok=True)
        cfg.out.write_text(report.model_dump_json(indent=2), encoding="utf-8")
    return report


async def _team_rows(
    cfg: AdvancedConfig, profile: str, sleep: Sleep, reference: IdealReference
) -> list[AdvancedRow]:
    """The report task: plain closedloop, one loop, three loops, three loops + coordinator."""
    faults, runner = _runner(cfg, profile, "eval", sleep)
    extras = Extras()
    variants: dict[str, Any] = {PLAIN: PlainVariant(PLAIN, extras)}
    for mode in ("single", "team", "coordinated"):
        variants[f"team:{mode}"] = TeamVariant(f"team:{mode}", extras, mode, reference)
    runner.strategies.update(variants)
    pool = sorted((t for t in runner.tasks.values() if t.domain == "report"), key=lambda t: t.id)
    stride = max(1, len(pool) // max(1, cfg.team_tasks))
    tasks = pool[::stride][: cfg.team_tasks]
    results = await run_jobs(faults, _jobs(profile, tasks, list(variants), cfg.seed), runner)
    out = []
    for name in variants:
        if name == PLAIN:
            continue
        mine = [extras.get(name, t.id) for t in tasks]
        replans = sum(int(m.get("replans", 0)) for m in mine)
        peaks: dict[str, int] = {}
        for m in mine:
            peaks[str(m.get("peak", "normal"))] = peaks.get(str(m.get("peak", "normal")), 0) + 1
        handed = sum(r.handed_over for r in results if r.strategy == name)
        note = f"re-plans {replans}; handovers {handed}; peak decisions {peaks}"
        out.append(_row("distributed control (report)", name, profile, results, extras, note))
    return out


def _asdict(cfg: AdvancedConfig) -> dict[str, Any]:
    return {name: getattr(cfg, name) for name in cfg.__dataclass_fields__}
