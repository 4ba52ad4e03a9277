"""``closedloop bench``: benchmarks that need a model; ``refine`` compares feedback strategies,
``faults`` control under faults, ``overhead`` the loop's own cost, ``tools`` tool calling."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated, Literal

import typer
from rich.console import Console

from closedloop._exceptions import ConfigurationError
from closedloop.harness import (
    SEED_TASKS,
    BenchConfig,
    BenchReport,
    BudgetBenchConfig,
    describe_tasks,
    load_humaneval,
    load_task_file,
    load_verified_tasks,
    render_budget_report,
    render_report,
    run_budget_bench,
    run_refine_bench,
)

app = typer.Typer(help="Benchmarks on real models.", no_args_is_help=True)
# Tables are wide; a pipe or CI log would otherwise fold them to 80 columns.
_out = Console(width=None if Console().is_terminal else 200)
_err = Console(stderr=True)


def _say(line: str) -> None:
    """A progress line on stderr (the tables stay on stdout)."""
    _err.print(line, highlight=False)


@app.callback()
def _group() -> None:
    """Benchmarks on real models."""
    # A callback keeps ``bench`` a group even while it has one command: ``bench refine``.


@app.command("refine")
def refine(
    tasks: Annotated[
        str,
        typer.Option(
            help="Task set: seed (the four refinement tasks), humaneval, or a JSONL file "
            "of your own tasks in HumanEval's form (docs/how-to/your-tasks.md)."
        ),
    ] = "seed",
    explain: Annotated[
        bool,
        typer.Option(
            "--explain", help="Print how the tasks split into checks and stop (no model)."
        ),
    ] = False,
    limit: Annotated[int | None, typer.Option(help="Only the first N tasks.")] = None,
    strategies: Annotated[
        str,
        typer.Option(
            help=(
                "Comma-separated: blind_retry, blind_retry@T (rounds 2+ at temperature T), "
                "self_refine, pid, pid_adaptive, pid_aggressive, focused, auto; any with "
                "+intervalN."
            )
        ),
    ] = "blind_retry,self_refine,pid,pid+interval2",
    rounds: Annotated[int, typer.Option(help="Rounds per run, round 1 included.")] = 4,
    model: Annotated[str, typer.Option(help="Model spec.")] = "local:qwen2.5-coder-0.5b",
    temperature: Annotated[float, typer.Option(help="The same for every strategy.")] = 0.2,
    seed: Annotated[int, typer.Option(help="Round k uses seed + k - 1, for every strategy.")] = 0,
    max_tokens: Annotated[int, typer.Option(help="Per generation.")] = 768,
    loopgain: Annotated[
        bool, typer.Option(help="Add the loopgain-stopped self-refine column (needs loopgain).")
    ] = True,
    out: Annotated[
        Path, typer.Option(help="Folder for results.json and pass_rate_by_round.png.")
    ] = Path("runs/bench-refine"),
    cache: Annotated[
        Path | None,
        typer.Option(help="SQLite file keeping generations between runs (resumes a long run)."),
    ] = None,
    threads: Annotated[
        int | None, typer.Option(help="llama.cpp threads for a local model (default: all cores).")
    ] = None,
    shard: Annotated[
        str | None,
        typer.Option(help="K/N: every N-th task from the K-th; shards on one --cache split a run."),
    ] = None,
    executor: Annotated[
        str,
        typer.Option(
            help="asyncio (task by task here) or ray (one Ray task per task, each worker "
            "loading the model; needs the 'ray' extra)."
        ),
    ] = "asyncio",
    ray_address: Annotated[
        str | None,
        typer.Option(help="With --executor ray: an existing cluster; default: a local Ray."),
    ] = None,
    budget: Annotated[
        int | None,
        typer.Option(
            help="A total of N generations for the whole batch (round 1 of every task "
            "included), spent by each of --policies in place of a per-task round count."
        ),
    ] = None,
    budget_tokens: Annotated[
        int | None,
        typer.Option(
            help="A total of tokens (prompt + completion) for the batch; with or "
            "without --budget (whichever is reached first)."
        ),
    ] = None,
    policies: Annotated[
        str,
        typer.Option(
            help="With a budget, comma-separated: even:STRATEGY (an equal share each), "
            "resample_until_pass[@T], allocator, allocator_focused."
        ),
    ] = (
        "even:blind_retry,even:blind_retry@0.6,even:self_refine,resample_until_pass,"
        "resample_until_pass@0.6,allocator"
    ),
    cache_only: Annotated[
        bool,
        typer.Option(
            "--cache-only",
            help="With a budget: no model; generations come from --cache, and a request "
            "not in it is recorded as a miss (a failed round), not generated.",
        ),
    ] = False,
) -> None:
    """Blind retry, self-refine and PID feedback on the same tasks, seeds and model; with
    --budget or --budget-tokens, allocation policies at one total for the batch."""
    chosen = task_set(tasks)
    if explain:
        _explain(chosen, limit)
        return
    if budget is not None or budget_tokens is not None:
        _refine_budgeted(
            BudgetBenchConfig(
                tasks=chosen,
                limit=limit,
                policies=_csv(policies),
                generations=budget,
                tokens=budget_tokens,
                model=model,
                temperature=temperature,
                seed=seed,
                max_tokens=max_tokens,
                out=out,
                cache_path=cache,
                cache_only=cache_only,
                threads=threads,
            )
        )
        return
    if cache_only:
        raise ConfigurationError("--cache-only", True, "replays a budgeted run: add --budget N")
    _check_executor(executor, ray_address)
    shard_kn: tuple[int, int] | None = None
    if shard is not None:
        k, _, n = shard.partition("/")
        if not (k.isdigit() and n.isdigit()):
            raise ConfigurationError("--shard", shard, "must look like 1/2")
        shard_kn = (int(k), int(n))
    config = BenchConfig(
        tasks=chosen,
        limit=limit,
        strategies=tuple(s.strip() for s in strategies.split(",") if s.strip()),
        rounds=rounds,
        model=model,
        temperature=temperature,
        seed=seed,
        max_tokens=max_tokens,
        loopgain=loopgain,
        out=out,
        cache_path=cache,
        threads=threads,
        shard=shard_kn,
    )
    report = asyncio.run(refine_on(config, executor, ray_address))
    render_report(report, _out)
    _out.print(f"results: {out / 'results.json'}, plot: {out / 'pass_rate_by_round.png'}")


def _refine_budgeted(config: BudgetBenchConfig) -> None:
    """``bench refine --budget``: the policies at one total, their tables and plots."""
    report = asyncio.run(run_budget_bench(config, progress=_say))
    render_budget_report(report, _out)
    out = config.out
    _out.print(
        f"results: {out}/results.json, plots: {out}/pass_rate_vs_cost.png, {out}/allocation.png"
    )


def task_set(tasks: str) -> Literal["seed", "humaneval"] | Path:
    """``--tasks``: a built-in set by name, or the Path of a task file that exists."""
    if tasks == "seed":
        return "seed"
    if tasks == "humaneval":
        return "humaneval"
    path = Path(tasks)
    if not path.is_file():
        raise ConfigurationError(
            "--tasks", tasks, "must be 'seed', 'humaneval' or a JSONL task file (no such file)"
        )
    return path


def _explain(chosen: Literal["seed", "humaneval"] | Path, limit: int | None) -> None:
    """The split of every task, as ``--explain`` prints it. A task file's references are
    checked after the split is printed, so a failing check can be read next to its error."""
    if isinstance(chosen, Path):
        code_tasks = [p.task() for p in load_task_file(chosen)[:limit]]
    elif chosen == "seed":
        code_tasks = list(SEED_TASKS)[:limit]
    else:
        code_tasks = [p.task() for p in load_humaneval(limit=limit)]
    _out.print(describe_tasks(code_tasks), end="", highlight=False, markup=False)
    total = sum(len(t.checks) for t in code_tasks)
    _out.print(f"{len(code_tasks)} task(s), {total} check(s)", highlight=False)
    if isinstance(chosen, Path):
        asyncio.run(load_verified_tasks(chosen, limit=limit))
        _out.print("every reference passes its checks; an empty candidate fails", highlight=False)


async def refine_on(config: BenchConfig, executor: str, ray_address: str | None) -> BenchReport:
    """``run_refine_bench`` here (``asyncio``) or on Ray (a local one, or ``ray_address``)."""

    def say(message: str) -> None:
        _err.print(message, highlight=False)

    if executor != "ray":
        return await run_refine_bench(config, progress=say)
    from ..benchmarks import RayExecutor  # ray is an optional extra: imported on demand

    with RayExecutor(ray_address) as on_ray:
        return await run_refine_bench(config, progress=say, executor=on_ray)


# --- shared with the faults and budget commands (_faults.py) --------------------------------


def _csv(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def _check_executor(executor: str, ray_address: str | None) -> None:
    if executor not in ("asyncio", "ray"):
        raise ConfigurationError("--executor", executor, "must be 'asyncio' or 'ray'")
    if ray_address is not None and executor != "ray":
        raise ConfigurationError("--ray-address", ray_address, "needs --executor ray")


@app.command("overhead")
def overhead(
    steps: Annotated[int, typer.Option(help="Tool steps per run.")] = 10,
    rounds: Annotated[int, typer.Option(help="Measured rounds per loop (median reported).")] = 30,
    out: Annotated[Path, typer.Option(help="Folder for overhead.json.")] = Path(
        "runs/bench-overhead"
    ),
    profile_rounds: Annotated[
        int, typer.Option(help="Extra rounds under cProfile (where the time goes; 0: none).")
    ] = 5,
    repeats: Annotated[
        int, typer.Option(min=1, help="Whole runs; the file keeps the median run and every ratio.")
    ] = 1,
) -> None:
    """Per-step cost of the loop itself: closedloop vs a plain loop vs LangGraph."""
    from ..benchmarks import median_run, render_overhead, run_overhead_bench, write_json

    runs = []
    for n in range(repeats):
        if repeats > 1:
            _err.print(f"run {n + 1}/{repeats}", highlight=False)
        runs.append(
            asyncio.run(
                run_overhead_bench(steps=steps, rounds=rounds, profile_rounds=profile_rounds)
            )
        )
    report = median_run(runs)
    command = (
        f"nice -n 19 .venv/bin/python bench/overhead.py --steps {steps} --rounds {rounds} "
        f"--profile-rounds {profile_rounds} --out {out}"
        + (f" --repeats {repeats}" if repeats > 1 else "")
    )
    report = report.model_copy(update={"command": command})
    render_overhead(report, _out)
    path = write_json(report, out / "overhead.json")
    _out.print(f"report: {path}")


@app.command("tools")
def tools(
    tasks: Annotated[
        Path | None,
        typer.Option(help="A JSONL task file (docs/how-to/your-tasks.md); default: --split."),
    ] = None,
    split: Annotated[str, typer.Option(help="A generated split: dev or eval.")] = "dev",
    limit: Annotated[
        int | None, typer.Option(help="The first N tasks, the families taken in turn.")
    ] = None,
    family: Annotated[
        str | None,
        typer.Option(help="Comma-separated families to keep (single,choose: the one-call tasks)."),
    ] = None,
    models: Annotated[
        str, typer.Option(help="Comma-separated model specs, weakest first (strong: the last).")
    ] = "test:oracle",
    strategies: Annotated[
        str,
        typer.Option(
            help="Comma-separated: open_loop, strict, reask@N, votes@k, strong, closedloop, "
            "frozen, ladder."
        ),
    ] = "open_loop,strict",
    out: Annotated[
        Path | None, typer.Option(help="Report JSON path (the plane PNG goes beside it).")
    ] = None,
    cost: Annotated[str, typer.Option(help="The plane's cost axis: tokens or wall_s.")] = "tokens",
    threads: Annotated[
        int | None, typer.Option(help="Threads for local models (1 is fastest on shared cores).")
    ] = None,
    budget_s: Annotated[
        float | None, typer.Option(help="Stop before the next task after this many seconds.")
    ] = None,
    no_plot: Annotated[bool, typer.Option("--no-plot", help="Skip the PNG.")] = False,
    no_progress: Annotated[bool, typer.Option("--no-progress", help="No progress bar.")] = False,
    regenerate: Annotated[
        bool, typer.Option("--regenerate", help="Rewrite the generated dev and eval sets.")
    ] = False,
    explain: Annotated[
        bool, typer.Option("--explain", help="List the tasks and what each expects; no model.")
    ] = False,
) -> None:
    """Tool-calling tasks: one-call baselines, fixed settings and the loop, success and cost."""
    from ..tools._command import ToolsCommand, run_tools_command

    if split not in ("dev", "eval"):
        raise ConfigurationError("--split", split, "must be dev or eval")
    if cost not in ("tokens", "wall_s"):
        raise ConfigurationError("--cost", cost, "must be tokens or wall_s")
    options = ToolsCommand(
        tasks=tasks,
        split="dev" if split == "dev" else "eval",
        limit=limit,
        families=family,
        models=models,
        strategies=strategies,
        out=out,
        cost="tokens" if cost == "tokens" else "wall_s",
        threads=threads,
        budget_s=budget_s,
        plot=not no_plot,
        progress=not no_progress,
        regenerate=regenerate,
        explain=explain,
    )
    run_tools_command(options, say=lambda line: _out.print(line, highlight=False, markup=False))
