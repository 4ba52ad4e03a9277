"""``closedloop bench faults`` and ``closedloop bench budget``: control under faults and the
success-cost plane of retry budgets (the logic lives in ``closedloop_bench.benchmarks``)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from closedloop._exceptions import ConfigurationError

from . import _faults_options as opt
from ._bench import _check_executor, _csv, _err, _out, _say, app
from ._recorded import recorded_command


def _steps(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in _csv(text))
    except ValueError:
        raise ConfigurationError("--steps", text, "must be comma-separated integers") from None


@app.command("faults")
def faults(
    ctx: typer.Context,
    model: opt.Model = "test:oracle",
    quick: opt.Quick = False,
    warnings: opt.Warnings = False,
    strategies: opt.Strategies = None,
    profiles: opt.Profiles = None,
    lambdas: opt.Lambdas = None,
    no_frontier: opt.NoFrontier = False,
    no_warnings: opt.NoWarnings = False,
    steps: opt.Steps = None,
    episodes: opt.Episodes = None,
    split: opt.Split = "eval",
    tasks: opt.Tasks = None,
    explain: opt.Explain = False,
    seed: opt.Seed = 0,
    latency_scale: opt.LatencyScale = 1.0,
    concurrency: opt.Concurrency = 16,
    attempts: opt.Attempts = 3,
    tool_timeout: opt.ToolTimeout = 10.0,
    closed_loop: opt.ClosedLoop = None,
    no_cache: opt.NoCache = False,
    executor: opt.Executor = "asyncio",
    ray_address: opt.RayAddress = None,
    out: opt.Out = None,
) -> None:
    """Open loop, fixed retries, LangGraph and closedloop on the same faulted world; then
    (unless --no-frontier / --no-warnings) the retry-budget frontier and the early-warning
    study on the same settings. Prints the table, the claims, the frontier and the warnings."""
    from ..benchmarks import FaultsConfig, render_faults, run_faults_bench

    if explain:
        _explain_world_tasks(tasks, split)
        return
    _check_executor(executor, ray_address)
    chosen = _chosen_strategies(strategies, warnings=warnings, closed_loop=closed_loop)
    if out is None:
        out = Path("bench/results/faults" if warnings else "runs/bench-faults")
    common: dict[str, Any] = {
        "model": model,
        "strategies": chosen,
        "split": split,
        "tasks": tasks,
        "seed": seed,
        "latency_scale": latency_scale,
        "concurrency": concurrency,
        "attempts": attempts,
        "tool_timeout_s": tool_timeout or None,
        "closed_loop": closed_loop or "auto",
        "cache": not no_cache,
        "executor": executor,
        "ray_address": ray_address,
        "out": out,
        "command": recorded_command(ctx, "closedloop bench faults"),
    }
    # Every option given is used: --quick only picks what the others leave open.
    given = _given(profiles, lambdas, steps, episodes)
    if warnings:
        _early_warning(common, given, quick=quick)
        return
    # The studies after the table take the steps and episodes the user gave, if any.
    asked: dict[str, Any] = {k: given[k] for k in ("steps", "episodes") if k in given}
    if quick:
        config = FaultsConfig.quick_preset(**common, **given)
    else:
        given.setdefault("profiles", ("seed000",))
        given.setdefault("steps", tuple(range(1, 11)))
        config = FaultsConfig(**common, episodes=given.pop("episodes", None), **given)

    report = asyncio.run(run_faults_bench(config, progress=lambda d, t, _r: _tick(d, t, 20)))
    render_faults(report, _out)
    lam = f", λ plot: {out / 'lambda.png'}" if report.lambda_curves else ""
    _out.print(f"report: {out / 'report.json'}, plot: {out / 'curves.png'}{lam}")
    if not no_frontier:
        _frontier(config, out, asked)
    if not no_warnings:
        _warnings_after(config, out, asked)


def _chosen_strategies(
    strategies: str | None, *, warnings: bool, closed_loop: str | None
) -> tuple[str, ...]:
    """The rows asked for, or the command's defaults; ``--closed-loop`` steers only the
    closedloop rows, so it is refused rather than ignored where there is none."""
    if strategies is not None:
        chosen = _csv(strategies)
    elif warnings:
        chosen = ("closedloop_adrc",)
    else:
        chosen = DEFAULT_STRATEGIES
    if closed_loop is not None and not any(name.startswith("closedloop") for name in chosen):
        raise ConfigurationError(
            "--closed-loop",
            closed_loop,
            f"applies to the closedloop strategies, and --strategies ({','.join(chosen)}) has none",
        )
    return chosen


def _given(
    profiles: str | None, lambdas: str | None, steps: str | None, episodes: int | None
) -> dict[str, Any]:
    """The cell settings the user gave (each only if given): profiles, steps, episodes."""
    given: dict[str, Any] = {}
    if profiles is not None or lambdas is not None:
        # --lambdas adds its profiles to --profiles: neither is dropped for the other.
        swept = tuple(f"regimes@{lam:g}" for lam in _lambdas(lambdas))
        given["profiles"] = tuple(dict.fromkeys((*_csv(profiles or ""), *swept)))
    if steps is not None:
        given["steps"] = _steps(steps)
    if episodes is not None:
        given["episodes"] = episodes
    return given


def _tick(done: int, total: int, lines: int = 10) -> None:
    """Progress on stderr, about ``lines`` times over a run and at its end."""
    if done == total or done % max(1, total // lines) == 0:
        _err.print(f"{done}/{total} episodes", highlight=False)


DEFAULT_STRATEGIES = (
    "open_loop",
    "fixed_retries",
    "langgraph",
    "closedloop_pid",
    "closedloop_adrc",
    "closedloop_frozen",
)
"""``faults``' rows by default: the baselines, the controlled loop, and the frozen loop."""


def _lambdas(text: str | None) -> tuple[float, ...]:
    """``--lambdas``: onset rates in [0, 1], each refused by its own text when it is not."""
    rates: list[float] = []
    for part in _csv(text or ""):
        try:
            value = float(part)
        except ValueError:
            raise ConfigurationError("--lambdas", part, "must be a number in [0, 1]") from None
        if not 0.0 <= value <= 1.0:  # also refuses nan
            raise ConfigurationError("--lambdas", part, "λ must lie in [0, 1]")
        rates.append(value)
    if text is not None and not rates:
        raise ConfigurationError("--lambdas", text, "name at least one rate")
    return tuple(dict.fromkeys(rates))


def _frontier(config: Any, out: Path, asked: dict[str, Any]) -> None:
    """The retry-budget sweep on the run's settings: sweep.json, frontier.png, its table."""
    from ..benchmarks._artefacts import frontier_plan, run_frontier

    plan = frontier_plan(config, **asked)
    c = plan.config
    _err.print(
        f"frontier: fixed_retries at attempts {list(plan.attempts)} x backoff "
        f"{list(plan.backoffs)} s and {', '.join(plan.adaptive)}, on {', '.join(c.profiles)}, "
        f"steps {list(c.steps)}, {c.episodes} episodes per cell",
        highlight=False,
    )
    sweep, plot = asyncio.run(run_frontier(plan, out, progress=_say))
    render_sweep(sweep, f"on {', '.join(c.profiles)}")
    _out.print(f"sweep: {out / 'sweep.json'}" + (f", plot: {plot}" if plot else ""))


def _warnings_after(config: Any, out: Path, asked: dict[str, Any]) -> None:
    """The early-warning study on the run's settings: early_warning.json and its table."""
    from ..benchmarks._artefacts import run_study, warnings_config
    from ..benchmarks._warnings import render_warnings

    study = warnings_config(config, **asked)
    _err.print(
        f"early warning: closedloop_adrc on {', '.join(study.profiles)}, steps "
        f"{list(study.steps)}, {study.episodes} episodes per cell",
        highlight=False,
    )

    report, path = asyncio.run(run_study(study, out, progress=_tick))
    render_warnings(report, _out)
    _out.print(f"early warning: {path}")


def _explain_world_tasks(tasks: Path | None, split: str) -> None:
    from ..reference import describe_world_tasks, load_tasks, load_world_tasks, verify_world_tasks

    if tasks is None:
        if split not in ("dev", "eval"):
            raise ConfigurationError("--split", split, "must be 'dev' or 'eval'")
        listed = load_tasks("dev" if split == "dev" else "eval")
        where = f"the {split} split"
    else:
        listed = load_world_tasks(tasks)
        where = str(tasks)
    _out.print(describe_world_tasks(listed), end="", highlight=False, markup=False)
    _out.print(f"{len(listed)} task(s) from {where}", highlight=False, markup=False)
    if tasks is not None:  # after the listing, so a refused task can be read next to it
        asyncio.run(verify_world_tasks(tasks))
        _out.print("every ideal run passes its checker; an empty run fails", highlight=False)


@app.command("budget")
def budget(
    ctx: typer.Context,
    model: Annotated[str, typer.Option(help="Model spec, or test:oracle.")] = "test:oracle",
    profiles: Annotated[str, typer.Option(help="Comma-separated fault profiles.")] = "harsh",
    steps: Annotated[str, typer.Option(help="Comma-separated step counts (1-10).")] = "1,3,5,7",
    episodes: Annotated[int, typer.Option(help="Episodes per (profile, steps) cell.")] = 5,
    attempts: Annotated[str, typer.Option(help="Attempts per call to sweep.")] = "1,2,3,4,5,6",
    backoffs: Annotated[str, typer.Option(help="First backoffs to sweep, s.")] = "0.1,0.5,2",
    adaptive: Annotated[
        str, typer.Option(help="Adaptive strategies, run at the largest attempt budget.")
    ] = "closedloop_pid,closedloop_budget",
    seed: Annotated[int, typer.Option(help="Base of every episode's fault seed.")] = 0,
    concurrency: Annotated[int, typer.Option(help="Episodes in flight at once.")] = 8,
    out: Annotated[Path, typer.Option(help="Folder for sweep.json and frontier.png.")] = Path(
        "runs/bench-budget"
    ),
) -> None:
    """The success–cost plane: every fixed retry budget against the adaptive loop."""
    import json

    from ..benchmarks import FaultsConfig, plot_budget, run_budget_sweep

    try:
        tries = tuple(int(a) for a in _csv(attempts))
        waits = tuple(float(b) for b in _csv(backoffs))
    except ValueError as exc:
        raise typer.BadParameter(f"--attempts and --backoffs take numbers: {exc}") from None
    base = FaultsConfig(
        model=model,
        profiles=_csv(profiles),
        steps=_steps(steps),
        episodes=episodes,
        seed=seed,
        concurrency=concurrency,
        command=recorded_command(ctx, "closedloop bench budget"),
    )
    sweep = asyncio.run(
        run_budget_sweep(
            base, attempts=tries, backoffs=waits, adaptive=_csv(adaptive), progress=_say
        )
    )
    out.mkdir(parents=True, exist_ok=True)
    (out / "sweep.json").write_text(json.dumps(sweep, indent=2, default=str) + "\n")
    plot = plot_budget(sweep, out / "frontier.png")
    render_sweep(sweep)
    _out.print(f"sweep: {out / 'sweep.json'}" + (f", plot: {plot}" if plot else ""))


def render_sweep(sweep: dict[str, Any], where: str = "") -> None:
    """The success–cost table of a budget sweep, and each adaptive row's verdict."""
    title = "success and cost per episode: fixed budgets and the loop"
    table = Table(title=f"{title} ({where})" if where else title)
    for column in ("strategy", "attempts", "backoff s", "success % [95 % CI]", "requests",
                   "latency s", "frontier"):  # fmt: skip
        table.add_column(column)
    front = {(p["attempts"], p["backoff_s"]) for p in sweep["frontier"]}
    for p in [*sweep["fixed"], *sweep["adaptive"]]:
        on = p["strategy"] == "fixed_retries" and (p["attempts"], p["backoff_s"]) in front
        table.add_row(
            p["strategy"], str(p["attempts"]), f"{p['backoff_s']:g}",
            f"{100 * p['success']:.1f} [{100 * p['ci_low']:.1f}, {100 * p['ci_high']:.1f}]",
            f"{p['requests']:.2f}", f"{p['latency_s']:.2f}", "yes" if on else "",
        )  # fmt: skip
    _out.print(table)
    for v in sweep["verdicts"]:
        _out.print(
            f"{v['strategy']}: target {'met' if v['target_met'] else 'NOT met'} ({v['how']})"
        )


def _early_warning(common: dict[str, Any], given: dict[str, Any], *, quick: bool) -> None:
    """``faults --warnings``: the early-warning study on regime onsets, written and shown."""
    from ..benchmarks import FaultsConfig
    from ..benchmarks._warnings import render_warnings, run_warnings, write_warnings

    out: Path = common.pop("out")
    command = common.pop("command")  # the line given, --warnings in it
    config = FaultsConfig(
        **common,
        profiles=given.get("profiles", ("regimes@0.1", "regimes@0.2")),
        steps=given.get("steps", (5, 7, 10)),
        episodes=given.get("episodes", 2 if quick else 8),
        quick=quick,
        command=command,
    )

    report = asyncio.run(run_warnings(config, progress=_tick))
    render_warnings(report, _out)
    path = write_warnings(report, out / "early_warning.json")
    _out.print(f"report: {path}")
