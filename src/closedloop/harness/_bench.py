"""``closedloop bench refine``: strategies side by side on the same tasks, seeds and model.

Round 1 is the same call for every strategy (same prompt, same seed), so it is made
once per task and shared. Completions are cached by the exact request: a fixed seed
makes the local models deterministic, so the cache saves time without changing results
(the loopgain comparison reruns self-refine almost for free this way).

"Pass rate after round k" is the score of the output the harness would return if the
run ended after round k: the best evaluated round so far. A run that stopped early
keeps its returned score for the later rounds.
"""

from __future__ import annotations

import importlib
import json
import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from rich.console import Console
from rich.table import Table

from .._exceptions import ConfigurationError
from .._extras import require_extra
from .._validation import require_int_at_least
from ..models import Model
from ._auto import strategy_from_spec
from ._bench_run import BenchRun, load_tasks, model_generator
from ._curves import round_curve
from ._plots import pyplot, save_figure
from ._refiner import Refiner, SandboxEvaluator
from ._results import RefinementResult
from ._stop import (
    RefineState,
    StopDecision,
    StopReason,
    stop_on_fixed_point,
    stop_on_lyapunov,
    stop_on_trajectory,
    stop_when_target_met,
)
from ._strategies import self_refine
from ._tasks import CodeTask

__all__ = [
    "BenchConfig",
    "BenchReport",
    "LoopGainStop",
    "render_report",
    "run_refine_bench",
    "target_lines",
    "write_outputs",
]

DEFAULT_STRATEGIES = ("blind_retry", "self_refine", "pid", "pid_adaptive", "pid+interval2")
LOOPGAIN_VERSION = "0.6.5"


@dataclass(frozen=True, slots=True, kw_only=True)
class BenchConfig(BenchRun):
    """What ``closedloop bench refine`` runs; the CLI options map one to one."""

    strategies: tuple[str, ...] = DEFAULT_STRATEGIES
    rounds: int = 4
    loopgain: bool = True
    # (k, n): only every n-th task from the k-th (1-based). Shards sharing ``cache_path``
    # split a long run between processes; a run without a shard then reads them all back.
    shard: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        BenchRun.__post_init__(self)  # slotted dataclasses cannot use bare super()
        if self.shard is not None:
            k, n = self.shard
            if not 1 <= k <= n:
                raise ConfigurationError("shard", self.shard, "must be (k, n) with 1 <= k <= n")
        require_int_at_least("rounds", self.rounds, 1)
        if not self.strategies:
            raise ConfigurationError("strategies", self.strategies, "name at least one")
        for spec in self.strategies:
            strategy_from_spec(spec)  # validates every name before any model call


@dataclass(frozen=True, slots=True)
class LoopGainStop:
    """Stop when a loopgain ``LoopGain`` monitor fed with ``1 − score`` says so.

    Replays the evaluated scores into a fresh monitor each time, so it is a pure policy
    like closedloop's own. ``loopgain`` is an optional dependency (the ``bench`` extra).
    """

    target: float = 1.0
    module: Any = None

    def __call__(self, state: RefineState) -> StopDecision | None:
        if not state.last_evaluated:
            return None
        lg_module = self.module if self.module is not None else _loopgain()
        if lg_module is None:
            raise ConfigurationError("loopgain", None, f"install loopgain=={LOOPGAIN_VERSION}")
        monitor = lg_module.LoopGain(target_error=max(0.0, 1.0 - self.target), max_iterations=None)
        for score in state.evaluated:
            monitor.observe(max(0.0, 1.0 - score))
        if not monitor.should_continue():
            return StopDecision(StopReason.EXTERNAL, f"loopgain: {monitor.result.outcome}")
        return None


def _loopgain() -> Any:
    # An explicit "no" to loopgain's opt-in telemetry: no notice, no state file, nothing sent.
    os.environ.setdefault("LOOPGAIN_TELEMETRY", "0")
    try:
        module = importlib.import_module("loopgain")
    except ImportError:
        return None
    return module


@dataclass(slots=True)
class BenchReport:
    """Every run of the bench, and the summaries printed from them."""

    config: BenchConfig
    tasks: list[str]
    runs: dict[str, list[RefinementResult]] = field(default_factory=dict)
    stop_runs: dict[str, list[RefinementResult]] = field(default_factory=dict)
    loopgain_note: str | None = None
    model_calls: int = 0
    cache_hits: int = 0
    wall_s: float = 0.0

    def pass_rate_by_round(self, strategy: str) -> list[float]:
        """Mean returned pass rate after each round (see the module docstring)."""
        runs = self.runs[strategy]
        return [
            statistics.fmean(_returned_after(r, k) for r in runs)
            for k in range(1, self.config.rounds + 1)
        ]

    def summary(self, strategy: str) -> dict[str, Any]:
        """One strategy's figures over its runs: pass rates, rounds, calls, tokens and time."""
        runs = self.runs[strategy]
        reached = [r.rounds_to_target for r in runs if r.rounds_to_target is not None]
        return {
            "strategy": strategy,
            "pass_rate_by_round": self.pass_rate_by_round(strategy),
            "solved": sum(1 for r in runs if r.best_score >= r.target - 1e-12),
            "tasks": len(runs),
            "mean_rounds_to_pass": statistics.fmean(reached) if reached else None,
            "evaluator_calls": sum(r.evaluator_calls for r in runs),
            "regressions": sum(r.regressions for r in runs),
            "returned_regressed": sum(1 for r in runs if r.returned_regressed),
            "prompt_tokens": sum(r.prompt_tokens for r in runs),
            "completion_tokens": sum(r.completion_tokens for r in runs),
            "time_s": sum(r.elapsed_s for r in runs),
        }

    def stop_summary(self, name: str) -> dict[str, Any]:
        """One stop rule's figures over its runs: rounds, pass rate, wasted rounds, outcomes."""
        runs = self.stop_runs[name]
        return {
            "stop": name,
            "mean_rounds": statistics.fmean(len(r.rounds) for r in runs),
            "final_pass_rate": statistics.fmean(r.best_score for r in runs),
            "wasted_rounds": sum(len(r.rounds) - r.best_round for r in runs),
            "outcomes": _count(
                r.stop_reason + (f" ({r.stop_detail})" if r.stop_reason == "external" else "")
                for r in runs
            ),
        }

    def to_json(self) -> dict[str, Any]:
        """The whole report as a JSON-ready dict: its configuration and every figure."""
        cfg = self.config
        return {
            "config": {
                **cfg.run_json(),
                "strategies": list(cfg.strategies),
                "rounds": cfg.rounds,
                "shard": None if cfg.shard is None else list(cfg.shard),
            },
            "tasks": self.tasks,
            "wall_s": self.wall_s,
            "model_calls": self.model_calls,
            "cache_hits": self.cache_hits,
            "summaries": [self.summary(s) for s in self.runs],
            # Pass rate against cumulative generations and tokens, round by round.
            "curves": {s: round_curve(rs, cfg.rounds) for s, rs in self.runs.items()},
            "stops": [self.stop_summary(s) for s in self.stop_runs],
            "loopgain_note": self.loopgain_note,
            "runs": {s: [r.model_dump(mode="json") for r in rs] for s, rs in self.runs.items()},
            "stop_runs": {
                s: [r.model_dump(mode="json") for r in rs] for s, rs in self.stop_runs.items()
            },
        }


def _count(items: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in items:
        out[item] = out.get(item, 0) + 1
    return out


def _returned_after(result: RefinementResult, k: int) -> float:
    scores = [r.score for r in result.rounds[:k] if r.score is not None]
    return max(scores) if scores else 0.0


class TaskExecutor(Protocol):
    """Runs each task (round 1 and every strategy) elsewhere and merges the reports, e.g.
    ``closedloop_bench.benchmarks.RayExecutor``, whose workers build the model from ``config.model``."""

    async def run_refine(
        self,
        config: BenchConfig,
        tasks: Sequence[CodeTask],
        *,
        progress: Callable[[str], None] | None = None,
    ) -> BenchReport: ...


async def run_refine_bench(
    config: BenchConfig,
    *,
    model: Model | None = None,
    tasks: Sequence[CodeTask] | None = None,
    evaluator: SandboxEvaluator | None = None,
    progress: Callable[[str], None] | None = None,
    clock: Callable[[], float] = time.perf_counter,
    executor: TaskExecutor | None = None,
) -> BenchReport:
    """Run every strategy on every task; ``model``/``tasks`` override the config's.

    ``executor`` runs the tasks elsewhere (each builds its own model and evaluator)."""
    say = progress or (lambda _msg: None)
    started = clock()
    sandbox = evaluator.sandbox if evaluator is not None else None
    task_list = list(tasks) if tasks is not None else await load_tasks(config, sandbox)
    if config.shard is not None:
        k, n = config.shard
        task_list = task_list[k - 1 :: n]
    if executor is not None:
        if model is not None or evaluator is not None:
            raise ConfigurationError("executor", executor, "builds its own model and evaluator")
        report = await executor.run_refine(config, task_list, progress=say)
        report.wall_s = clock() - started
        if config.out is not None:
            write_outputs(report, config.out)
        return report
    generator = model_generator(config, model)
    evaluator = evaluator if evaluator is not None else SandboxEvaluator()
    strategies = [strategy_from_spec(s) for s in config.strategies]
    report = BenchReport(config=config, tasks=[t.name for t in task_list])
    default_stop = (
        stop_when_target_met() | stop_on_lyapunov() | stop_on_trajectory() | stop_on_fixed_point()
    )
    lg_module = _loopgain() if config.loopgain else None
    if config.loopgain and lg_module is None:
        report.loopgain_note = (
            f"loopgain column unavailable: install loopgain=={LOOPGAIN_VERSION} (the `bench` extra)"
        )
    elif not config.loopgain:
        report.loopgain_note = "loopgain column disabled"
    stops: dict[str, Any] = {
        "closedloop (target | Lyapunov | trajectory | fixed point)": default_stop
    }
    if lg_module is not None:
        version = getattr(lg_module, "__version__", "?")
        stops[f"loopgain {version}"] = LoopGainStop(module=lg_module)

    def refiner(strategy: Any, stop: Any) -> Refiner:
        return Refiner(
            generator, evaluator, strategy, stop=stop, max_rounds=config.rounds, seed=config.seed
        )

    for index, task in enumerate(task_list, 1):
        first = await refiner(self_refine(), default_stop).first_round(task)
        say(f"[{index}/{len(task_list)}] {task.name}: round 1 scored {first.score:.2f}")
        for strategy in strategies:
            result = await refiner(strategy, default_stop).run(task, first=first)
            report.runs.setdefault(strategy.name, []).append(result)
            say(f"    {strategy.name:<16} {_fmt_scores(result)} -> {result.best_score:.2f}")
        for name, stop in stops.items():
            result = await refiner(self_refine(), stop).run(task, first=first)
            report.stop_runs.setdefault(name, []).append(result)
    report.model_calls = generator.calls
    report.cache_hits = generator.cache_hits
    report.wall_s = clock() - started
    if config.out is not None:
        write_outputs(report, config.out)
    return report


def _fmt_scores(result: RefinementResult) -> str:
    return " ".join("  - " if s is None else f"{s:.2f}" for s in result.scores)


def write_outputs(report: BenchReport, out: Path) -> list[Path]:
    """``results.json`` and ``pass_rate_by_round.png`` under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    json_path = out / "results.json"
    json_path.write_text(json.dumps(report.to_json(), indent=2), encoding="utf-8")
    require_extra("matplotlib", "plots", "the pass-rate plot")
    fig, ax = pyplot().subplots(figsize=(6, 4))
    rounds = list(range(1, report.config.rounds + 1))
    for name in report.runs:
        ax.plot(rounds, report.pass_rate_by_round(name), marker="o", label=name)
    ax.set_xlabel("round")
    ax.set_ylabel("mean pass rate of the returned output")
    ax.set_xticks(rounds)
    ax.set_ylim(0.0, 1.02)
    ax.set_title(
        f"{report.config.tasks_label()} tasks ({len(report.tasks)}), {report.config.model}"
    )
    ax.grid(alpha=0.3)
    ax.legend()
    return [json_path, save_figure(fig, out / "pass_rate_by_round.png")]


def render_report(report: BenchReport, console: Console) -> None:
    """The tables ``closedloop bench refine`` prints."""
    cfg = report.config
    console.print(
        f"[bold]bench refine[/]: {len(report.tasks)} {cfg.tasks_label()} task(s), model {cfg.model}, "
        f"temperature {cfg.temperature}, seed {cfg.seed} (round k: seed + k - 1), "
        f"up to {cfg.rounds} rounds; wall time {report.wall_s:.1f} s"
    )
    console.print(
        "Round 1 is shared by all strategies (one call per task). Completions are cached by "
        "exact prompt + parameters (temperature, seed, max_tokens): with a fixed seed the model "
        f"is deterministic. Model calls {report.model_calls}, cache hits {report.cache_hits}."
    )
    table = Table(title="pass rate of the returned output after each round (mean over tasks)")
    table.add_column("strategy")
    for k in range(1, cfg.rounds + 1):
        table.add_column(f"R{k}", justify="right")
    for name in (
        "solved",
        "rounds to pass",
        "eval calls",
        "regressions",
        "regressed returned",
        "tokens in/out",
        "time s",
    ):
        table.add_column(name, justify="right")
    for strategy in report.runs:
        s = report.summary(strategy)
        mean_rounds = s["mean_rounds_to_pass"]
        table.add_row(
            strategy,
            *(f"{v:.3f}" for v in s["pass_rate_by_round"]),
            f"{s['solved']}/{s['tasks']}",
            "-" if mean_rounds is None else f"{mean_rounds:.2f}",
            str(s["evaluator_calls"]),
            str(s["regressions"]),
            str(s["returned_regressed"]),
            f"{s['prompt_tokens']}/{s['completion_tokens']}",
            f"{s['time_s']:.1f}",
        )
    console.print(table)
    stop_table = Table(title="self-refine under two stop rules (same calls, cached)")
    for name in ("stop rule", "mean rounds", "final pass rate", "wasted rounds", "outcomes"):
        stop_table.add_column(name)
    for name in report.stop_runs:
        s = report.stop_summary(name)
        outcomes = ", ".join(f"{k}: {v}" for k, v in s["outcomes"].items())
        stop_table.add_row(
            name,
            f"{s['mean_rounds']:.2f}",
            f"{s['final_pass_rate']:.3f}",
            str(s["wasted_rounds"]),
            outcomes,
        )
    console.print(stop_table)
    if report.loopgain_note:
        console.print(report.loopgain_note)
    for line in target_lines(report):
        console.print(line)


def target_lines(report: BenchReport) -> list[str]:
    """The issue's targets, measured: PID vs self-refine and blind retry after round 3."""
    k = min(3, report.config.rounds)
    after = {s: report.pass_rate_by_round(s)[k - 1] for s in report.runs}
    lines: list[str] = []
    for pid in (name for name in ("pid", "pid_adaptive") if name in after):
        for other, need in (("self_refine", 3.0), ("blind_retry", 5.0)):
            if other in after:
                gap = 100.0 * (after[pid] - after[other])
                ok = "met" if gap >= need else "NOT met"
                lines.append(
                    f"target: {pid} - {other} after round {k}: {gap:+.1f} points "
                    f"(want >= +{need:.0f}): {ok}"
                )
    ours = [n for n in report.stop_runs if n.startswith("closedloop")]
    theirs = [n for n in report.stop_runs if n.startswith("loopgain")]
    if ours and theirs:
        a, b = report.stop_summary(ours[0]), report.stop_summary(theirs[0])
        ok = (
            a["mean_rounds"] < b["mean_rounds"]
            and a["final_pass_rate"] >= b["final_pass_rate"] - 1e-9
        )
        lines.append(
            f"target: rounds on the self-refine loop, closedloop stop {a['mean_rounds']:.2f} "
            f"(pass rate {a['final_pass_rate']:.3f}) vs {theirs[0]} {b['mean_rounds']:.2f} "
            f"({b['final_pass_rate']:.3f}), fewer at an equal pass rate: "
            f"{'met' if ok else 'NOT met'}"
        )
    regressed = sum(report.summary(s)["returned_regressed"] for s in report.runs)
    lines.append(f"target: regressed outputs returned: {regressed} (want 0)")
    return lines
