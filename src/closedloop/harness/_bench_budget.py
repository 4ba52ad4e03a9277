"""``closedloop bench refine --budget N``: allocation policies side by side at one total.

Every policy gets the same batch, the same round 1 (shared) and the same total
(generations and/or tokens); the report holds, per policy, its curve of pass rate against
cumulative tokens and generations, every allocation with its reason, and paired
comparisons at equal generations and at equal tokens.

With ``cache_only`` nothing is generated: generations are served from the cache of
earlier runs (keyed by the exact request, so a budgeted policy hits wherever its prompt,
temperature and seed match an earlier call) and a miss is recorded as a failed round; the
report counts the misses per policy, so a replay says how far it can be trusted.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._exceptions import ConfigurationError, ModelError
from .._extras import require_extra
from ..models import Completion, MessagesInput, Model, ModelRequest
from ._allocate import error_driven, resample_until_pass, spread_evenly
from ._auto import strategy_from_spec
from ._bench_run import BenchRun, load_tasks, model_generator
from ._budget import BatchBudget, BatchPolicy, BudgetRun, MemoEvaluator, run_budgeted
from ._budget_report import plot_allocation, plot_cost_curves
from ._curves import Unit, common_cost, compare_at, cost_curve
from ._generator import CACHE_MISS
from ._refiner import SandboxEvaluator
from ._tasks import CodeTask

__all__ = [
    "DEFAULT_POLICIES",
    "BudgetBenchConfig",
    "BudgetReport",
    "policy_from_spec",
    "run_budget_bench",
]

DEFAULT_POLICIES = (
    "even:blind_retry",
    "even:blind_retry@0.6",
    "even:self_refine",
    "resample_until_pass",
    "resample_until_pass@0.6",
    "allocator",
)
_ALLOCATORS = {
    "allocator": ("resample", "resample@0.6", "pid"),
    "allocator_focused": ("resample", "resample@0.6", "focused"),
}


def policy_from_spec(spec: str) -> BatchPolicy:
    """``even:STRATEGY`` (any strategy spec, spread evenly), ``resample_until_pass[@T]``,
    ``allocator`` (actions resample, resample@0.6, pid) or ``allocator_focused`` (focused
    feedback in place of pid)."""
    spec = spec.strip()
    if spec.startswith("even:"):
        return spread_evenly(strategy_from_spec(spec.removeprefix("even:")))
    base, at, value = spec.partition("@")
    if base == "resample_until_pass":
        try:
            return resample_until_pass(float(value) if at else None)
        except ValueError:
            raise ConfigurationError("policy", spec, "@T must be a number") from None
    if spec in _ALLOCATORS:
        return error_driven(_ALLOCATORS[spec])
    known = "even:STRATEGY, resample_until_pass[@T], " + ", ".join(_ALLOCATORS)
    raise ConfigurationError("policy", spec, f"unknown; known: {known}")


@dataclass(frozen=True, slots=True, kw_only=True)
class BudgetBenchConfig(BenchRun):
    """What ``closedloop bench refine --budget`` runs."""

    policies: tuple[str, ...] = DEFAULT_POLICIES
    generations: int | None = None
    tokens: int | None = None
    cache_only: bool = False

    def __post_init__(self) -> None:
        BenchRun.__post_init__(self)  # slotted dataclasses cannot use bare super()
        self.budget()  # validates the totals
        if not self.policies:
            raise ConfigurationError("policies", self.policies, "name at least one")
        for spec in self.policies:
            policy_from_spec(spec)
        if self.cache_only and self.cache_path is None:
            raise ConfigurationError("cache_only", True, "needs --cache, the file to replay")

    def budget(self) -> BatchBudget:
        """The total as a :class:`BatchBudget`."""
        return BatchBudget(generations=self.generations, tokens=self.tokens)


@dataclass(slots=True)
class BudgetReport:
    """Every policy's budgeted run over the same batch."""

    config: BudgetBenchConfig
    tasks: list[str]
    runs: dict[str, BudgetRun] = field(default_factory=dict)
    evaluator_calls: int = 0
    wall_s: float = 0.0

    def comparison_cost(self, unit: Unit) -> int:
        """Where policies are compared in ``unit``: the budget's total when the budget is
        in that unit (a policy that left some unspent is read at its end), else the most
        that every policy spent."""
        total = self.config.generations if unit == "generations" else self.config.tokens
        return total if total is not None else common_cost(list(self.runs.values()), unit)

    def comparisons(self, unit: Unit) -> list[dict[str, Any]]:
        """Each allocator against each other policy, paired per problem, at
        :meth:`comparison_cost`."""
        runs = list(self.runs.values())
        if len(runs) < 2:
            return []
        cost = self.comparison_cost(unit)
        ours = [r for r in runs if r.policy.startswith("allocator")] or runs[-1:]
        return [
            compare_at(a, b, cost, unit).model_dump()
            for a in ours
            for b in runs
            if b.policy != a.policy
        ]

    def summary(self, run: BudgetRun) -> dict[str, Any]:
        """One policy's figures: spend, cache hits and misses, solved, returned regressions."""
        curve = cost_curve(run)
        last = curve[-1] if curve else None
        return {
            "policy": run.policy,
            "generations": run.generations,
            "tokens": run.tokens,
            "misses": run.misses,
            "cached": sum(1 for a in run.allocations if a.cached),
            "solved": run.solved,
            "problems": len(run.results),
            "pass_rate": None if last is None else last.pass_rate,
            "solved_interval": None if last is None else [last.solved_low, last.solved_high],
            "returned_regressed": run.returned_regressed,
        }

    def to_json(self) -> dict[str, Any]:
        """The whole report as a JSON-ready dict: config, summaries, curves, allocations."""
        cfg = self.config
        return {
            "config": {
                **cfg.run_json(),
                "policies": list(cfg.policies),
                "budget_generations": cfg.generations,
                "budget_tokens": cfg.tokens,
                "cache_only": cfg.cache_only,
            },
            "tasks": self.tasks,
            "wall_s": self.wall_s,
            "evaluator_calls": self.evaluator_calls,
            "summaries": [self.summary(r) for r in self.runs.values()],
            "equal_generations": self.comparisons("generations"),
            "equal_tokens": self.comparisons("tokens"),
            "curves": {
                name: [p.model_dump() for p in cost_curve(run)] for name, run in self.runs.items()
            },
            "allocations": {
                name: [a.model_dump() for a in run.allocations] for name, run in self.runs.items()
            },
            "results": {
                name: [
                    {
                        "task": r.task,
                        "best_score": r.best_score,
                        "best_round": r.best_round,
                        "rounds": len(r.rounds),
                        "returned_regressed": r.returned_regressed,
                    }
                    for r in run.results
                ]
                for name, run in self.runs.items()
            },
        }


class _ReplayOnlyModel:
    """The model's name, for the cache keys, and no model: a cache-only replay never calls
    it (``ModelGenerator(cache_only=True)`` raises on a miss first)."""

    def __init__(self, name: str) -> None:
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    async def complete(
        self, messages: MessagesInput, request: ModelRequest | None = None
    ) -> Completion:
        raise ModelError(f"{CACHE_MISS}: {self._name} is not loaded in a cache-only replay")


async def run_budget_bench(
    config: BudgetBenchConfig,
    *,
    model: Model | None = None,
    tasks: Sequence[CodeTask] | None = None,
    evaluator: SandboxEvaluator | None = None,
    progress: Callable[[str], None] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> BudgetReport:
    """Run every policy of ``config`` at its budget; ``model``/``tasks`` override the config's."""
    say = progress or (lambda _msg: None)
    started = clock()
    if tasks is None:
        sandbox = evaluator.sandbox if evaluator is not None else None
        tasks = await load_tasks(config, sandbox)
    if model is None and config.cache_only:
        model = _ReplayOnlyModel(config.model)
    generator = model_generator(config, model, cache_only=config.cache_only)
    memo = MemoEvaluator(evaluator)
    report = BudgetReport(config=config, tasks=[t.name for t in tasks])
    for spec in config.policies:
        policy = policy_from_spec(spec)
        run = await run_budgeted(
            tasks, generator, policy, config.budget(), evaluator=memo, seed=config.seed, clock=clock
        )
        report.runs[policy.name] = run
        say(
            f"{policy.name:<26} solved {run.solved}/{len(tasks)}, {run.generations} generations, "
            f"{run.tokens} tokens, {run.misses} not in the cache"
        )
    report.evaluator_calls = memo.calls
    report.wall_s = clock() - started
    if config.out is not None:
        write_budget_outputs(report, config.out)
    return report


def write_budget_outputs(report: BudgetReport, out: Path) -> list[Path]:
    """``results.json``, ``pass_rate_vs_cost.png`` and ``allocation.png`` under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    json_path = out / "results.json"
    json_path.write_text(json.dumps(report.to_json(), indent=2), encoding="utf-8")
    require_extra("matplotlib", "plots", "the pass-rate plots")
    return [json_path, plot_cost_curves(report, out), plot_allocation(report, out)]
