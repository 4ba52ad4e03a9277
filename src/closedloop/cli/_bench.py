"""``closedloop bench``: benchmarks that need a model; ``refine`` compares feedback strategies."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from .._exceptions import ConfigurationError
from ..harness import BenchConfig, render_report, run_refine_bench

app = typer.Typer(help="Benchmarks on real models.", no_args_is_help=True)
_out = Console()
_err = Console(stderr=True)


@app.callback()
def _group() -> None:
    """Benchmarks on real models."""
    # A callback keeps ``bench`` a group even while it has one command: ``bench refine``.


@app.command("refine")
def refine(
    tasks: Annotated[
        str, typer.Option(help="Task set: seed (seed 003's four) or humaneval.")
    ] = "seed",
    limit: Annotated[int | None, typer.Option(help="Only the first N tasks.")] = None,
    strategies: Annotated[
        str,
        typer.Option(help="Comma-separated: blind_retry, self_refine, pid, pid+interval2, auto."),
    ] = "blind_retry,self_refine,pid,pid+interval2",
    rounds: Annotated[int, typer.Option(help="Rounds per run, round 1 included.")] = 4,
    model: Annotated[str, typer.Option(help="Model spec.")] = "local:qwen2.5-coder-0.5b",
    temperature: Annotated[float, typer.Option(help="The same for every strategy.")] = 0.7,
    seed: Annotated[int, typer.Option(help="Round k uses seed + k - 1, for every strategy.")] = 0,
    max_tokens: Annotated[int, typer.Option(help="Per generation.")] = 768,
    loopgain: Annotated[
        bool, typer.Option(help="Add the loopgain-stopped self-refine column (needs loopgain).")
    ] = True,
    out: Annotated[
        Path, typer.Option(help="Folder for results.json and pass_rate_by_round.png.")
    ] = Path("runs/bench-refine"),
) -> None:
    """Blind retry, self-refine and PID feedback on the same tasks, seeds and model."""
    if tasks not in ("seed", "humaneval"):
        raise ConfigurationError("--tasks", tasks, "must be 'seed' or 'humaneval'")
    config = BenchConfig(
        tasks="seed" if tasks == "seed" else "humaneval",
        limit=limit,
        strategies=tuple(s.strip() for s in strategies.split(",") if s.strip()),
        rounds=rounds,
        model=model,
        temperature=temperature,
        seed=seed,
        max_tokens=max_tokens,
        loopgain=loopgain,
        out=out,
    )
    report = asyncio.run(
        run_refine_bench(config, progress=lambda m: _err.print(m, highlight=False))
    )
    render_report(report, _out)
    _out.print(f"results: {out / 'results.json'}, plot: {out / 'pass_rate_by_round.png'}")
