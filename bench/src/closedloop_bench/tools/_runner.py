"""The runner: every strategy on every model on every task, scored, one task at a time.

Each strategy gets the task's model behind a ``MeteredModel``: the calls and tokens the
report charges a task are the ones the meter saw (a strategy that called no model keeps
its own counts). Tasks run one after another: an embedded model answers one call at a time, so running
them side by side would only queue them and blur the seconds each task is charged. A
model error on one task is that task's failure, recorded with its reason; the run goes on.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from closedloop import ConfigurationError
from closedloop.models import MeteredModel, Model

from ._checkpoint import Checkpoint
from ._format import ToolTask
from ._models import ModelProvider, resolve_models
from ._report import TaskResult, ToolsReport, summarise
from ._score import replay, score
from ._strategies import Attempt, ToolStrategy, get_tool_strategy

__all__ = ["RUNS_ON", "ToolsConfig", "run_tools_bench"]

RUNS_ON = ("each", "strongest", "ladder")
"""Where a strategy runs: on each model, on the strongest (the last listed), on the ladder."""


@dataclass(frozen=True, slots=True)
class ToolsConfig:
    """What to run: model specs (or models), strategy names (or strategies), a label for
    the task source, and whether to draw progress bars.

    ``model_options`` go to ``load_model`` for every real spec (``n_threads=1`` keeps an
    embedded model fast on a machine whose cores are shared). ``budget_s`` stops the run
    before the next task once that many seconds have passed; the report says how many
    tasks ran. Every strategy answers a task before the next task starts, so a stopped
    run still compares the strategies on the same tasks. ``checkpoint`` names a JSONL
    file that keeps each result as it is scored: a run started again on it skips what
    it holds (a long run killed half way resumes where it stopped).
    """

    models: Sequence[str | Model] = ("test:oracle",)
    strategies: Sequence[str | ToolStrategy] = ("open_loop", "strict")
    source: str = "tasks"
    progress: bool = False
    model_options: Mapping[str, Any] = field(default_factory=dict)
    budget_s: float | None = None
    checkpoint: Path | None = None


def _strategies(items: Sequence[str | ToolStrategy]) -> list[ToolStrategy]:
    if isinstance(items, str) or not items:
        raise ConfigurationError("strategies", items, "must list at least one strategy")
    out = [get_tool_strategy(s) if isinstance(s, str) else s for s in items]
    names = [s.name for s in out]
    if len(set(names)) != len(names):
        raise ConfigurationError("strategies", names, "names must be unique")
    return out


async def run_tools_bench(
    tasks: Sequence[ToolTask],
    config: ToolsConfig = ToolsConfig(),
    *,
    clock: Callable[[], float] = time.perf_counter,
) -> ToolsReport:
    """Run ``config`` on ``tasks`` and summarise per strategy, model and family."""
    if not tasks:
        raise ConfigurationError("tasks", tasks, "must hold at least one task")
    strategies = _strategies(config.strategies)
    providers = resolve_models(config.models, options=config.model_options)
    if config.budget_s is not None and not config.budget_s > 0:
        raise ConfigurationError(
            "budget_s", config.budget_s, "must be a positive number of seconds"
        )
    results: list[TaskResult] = []
    last = len(providers) - 1
    plan = [
        (index, strategy)
        for index in range(len(providers))
        for strategy in strategies
        if _runs_on(strategy) == "each" or index == last
    ]
    total = len(tasks) * len(plan)
    kept = _checkpoint(config, tasks, providers, strategies)
    started = clock()
    ran: dict[str, int] = {}
    with _progress(config.progress, total) as advance:
        for index, provider in enumerate(providers):
            ran[provider.spec] = 0
            mine = [s for i, s in plan if i == index]
            for task in tasks:
                if config.budget_s is not None and clock() - started > config.budget_s:
                    break
                ran[provider.spec] += 1
                for strategy in mine:
                    label = (
                        _ladder_label(providers)
                        if _runs_on(strategy) == "ladder"
                        else provider.spec
                    )
                    result = None if kept is None else kept.get(task.id, strategy.name, label)
                    if result is None:
                        result = await _run_one(strategy, task, provider, providers, clock)
                        if kept is not None:
                            kept.append(result)
                    results.append(result)
                    advance(f"{strategy.name} · {label}")
    meta: dict[str, Any] = {"tasks_offered": len(tasks), "tasks_run": ran}
    if kept is not None and kept.held:
        meta["resumed_results"] = kept.held  # scored by an earlier, interrupted run
    if config.model_options:
        meta["model_options"] = dict(config.model_options)
    return summarise(
        results,
        source=config.source,
        models=[p.spec for p in providers]
        + ([_ladder_label(providers)] if any(_runs_on(s) == "ladder" for s in strategies) else []),
        strategies={s.name: s.fixed for s in strategies},
        wall_s=max(0.0, clock() - started),
        meta=meta,
    )


async def _run_one(
    strategy: ToolStrategy,
    task: ToolTask,
    provider: ModelProvider,
    providers: Sequence[ModelProvider],
    clock: Callable[[], float],
) -> TaskResult:
    if _runs_on(strategy) == "ladder":
        models = [p.for_task(task) for p in providers]
        label = _ladder_label(providers)
    else:
        models = [provider.for_task(task)]
        label = provider.spec
    attempt = await _attempt(strategy, task, models, clock)
    state = attempt.env_state
    if state is None and task.env is not None:
        state = replay(task, attempt.calls)[0]
    verdict = score(task, attempt.calls, attempt.final_text, state, answered=attempt.answered)
    return TaskResult.of(task, strategy.name, label, attempt, verdict)


def _checkpoint(
    config: ToolsConfig,
    tasks: Sequence[ToolTask],
    providers: Sequence[ModelProvider],
    strategies: Sequence[ToolStrategy],
) -> Checkpoint | None:
    if config.checkpoint is None:
        return None
    identity = {
        "source": config.source,
        "tasks": [t.id for t in tasks],
        "models": [p.spec for p in providers],
        "strategies": [s.name for s in strategies],
        "model_options": {k: config.model_options[k] for k in sorted(config.model_options)},
    }
    return Checkpoint(config.checkpoint, identity)


def _runs_on(strategy: ToolStrategy) -> str:
    runs_on = getattr(strategy, "runs_on", "each")
    if runs_on not in RUNS_ON:
        raise ConfigurationError(
            "runs_on", runs_on, f"strategy {strategy.name}: must be one of {', '.join(RUNS_ON)}"
        )
    if runs_on == "ladder" and not callable(getattr(strategy, "solve_ladder", None)):
        raise ConfigurationError(
            "runs_on", runs_on, f"strategy {strategy.name} has no solve_ladder(task, models)"
        )
    return str(runs_on)


def _ladder_label(providers: Sequence[ModelProvider]) -> str:
    return " > ".join(p.spec for p in providers)


async def _attempt(
    strategy: ToolStrategy, task: ToolTask, models: Sequence[Model], clock: Callable[[], float]
) -> Attempt:
    # Every call the strategy makes goes through a meter, so an agent-based strategy need
    # not count its own calls and tokens: what the meters saw is what the task cost.
    metered = [MeteredModel(m, clock=clock) for m in models]
    started = clock()
    try:
        if len(metered) == 1 and _runs_on(strategy) != "ladder":
            attempt = await strategy.solve(task, metered[0])
        else:
            attempt = await strategy.solve_ladder(task, metered)  # type: ignore[attr-defined]  # checked by _runs_on
    except ConfigurationError:
        raise
    except Exception as exc:  # a model failure is the task's failure, not the run's
        attempt = Attempt(error=f"{type(exc).__name__}: {exc}")
    wall = max(0.0, clock() - started)
    seen = sum(m.calls + m.errors for m in metered)
    return dataclasses.replace(
        attempt,
        model_calls=seen or attempt.model_calls,
        tokens_in=sum(m.prompt_tokens for m in metered) if seen else attempt.tokens_in,
        tokens_out=sum(m.completion_tokens for m in metered) if seen else attempt.tokens_out,
        wall_s=attempt.wall_s or wall,
    )


class _progress:
    """A rich progress bar over the run (or nothing, for tests and quiet runs)."""

    def __init__(self, enabled: bool, total: int) -> None:
        self._enabled = enabled
        self._total = total
        self._bar: Any = None
        self._task: Any = None

    def __enter__(self) -> Callable[[str], None]:
        if not self._enabled:
            return lambda _label: None
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self._bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
        )
        self._bar.start()
        self._task = self._bar.add_task("tools", total=self._total)

        def advance(label: str) -> None:
            self._bar.update(self._task, advance=1, description=label)

        return advance

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()
