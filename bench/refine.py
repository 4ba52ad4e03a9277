"""Feedback strategies side by side on real code tasks.

    .venv/bin/python bench/refine.py --tasks seed --rounds 3
    .venv/bin/python bench/refine.py --tasks humaneval --limit 20 --strategies self_refine,pid
    .venv/bin/python bench/refine.py --tasks examples/refine_tasks.jsonl
    .venv/bin/python bench/refine.py --tasks humaneval --budget 492 --cache-only --cache FILE

The same as ``closedloop bench refine``; the logic lives in ``closedloop.harness``
(``BenchConfig``, ``run_refine_bench``, ``render_report``). Writes ``results.json`` and
``pass_rate_by_round.png`` under ``--out``. The loopgain column needs loopgain 0.6.5.
With ``--budget N`` (generations) or ``--budget-tokens T`` the batch gets one total and
``--policies`` spend it (``BudgetBenchConfig``, ``run_budget_bench``): ``results.json``,
``pass_rate_vs_cost.png`` and ``allocation.png``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from rich.console import Console

from closedloop import ClosedLoopError
from closedloop.harness import (
    BenchConfig,
    BenchReport,
    BudgetBenchConfig,
    render_budget_report,
    render_report,
    run_budget_bench,
)
from closedloop.harness._bench_budget import DEFAULT_POLICIES
from closedloop_bench.cli._bench import refine_on, task_set


def parse_args(argv: list[str] | None) -> BenchConfig:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--tasks", default="seed", help="seed, humaneval or a JSONL task file of your own"
    )
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--strategies", default="blind_retry,self_refine,pid,pid+interval2")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--model", default="local:qwen2.5-coder-0.5b")
    parser.add_argument("--temperature", type=float, default=0.2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-tokens", type=int, default=768)
    parser.add_argument("--no-loopgain", action="store_true")
    parser.add_argument("--out", type=Path, default=Path("runs/bench-refine"))
    parser.add_argument(
        "--cache", type=Path, default=None, help="SQLite file keeping generations between runs"
    )
    parser.add_argument(
        "--threads", type=int, default=None, help="llama.cpp threads (default: every core)"
    )
    parser.add_argument(
        "--shard",
        default=None,
        help="K/N: only every N-th task from the K-th (processes sharing --cache split a run)",
    )
    _executor_options(parser)
    _budget_options(parser)
    args = parser.parse_args(argv)
    shard = None
    if args.shard is not None:
        k, _, n = args.shard.partition("/")
        if not (k.isdigit() and n.isdigit()):
            parser.error(f"--shard must look like 1/2, not {args.shard!r}")
        shard = (int(k), int(n))
    return BenchConfig(
        tasks=task_set(args.tasks),
        limit=args.limit,
        strategies=tuple(s.strip() for s in args.strategies.split(",") if s.strip()),
        rounds=args.rounds,
        model=args.model,
        temperature=args.temperature,
        seed=args.seed,
        max_tokens=args.max_tokens,
        loopgain=not args.no_loopgain,
        out=args.out,
        cache_path=args.cache,
        threads=args.threads,
        shard=shard,
    )


def _budget_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--budget", type=int, default=None, help="total generations for the whole batch"
    )
    parser.add_argument("--budget-tokens", type=int, default=None, help="total tokens")
    parser.add_argument("--policies", default=",".join(DEFAULT_POLICIES))
    parser.add_argument(
        "--cache-only", action="store_true", help="replay --cache; a miss is recorded, not made"
    )


def parse_budget(argv: list[str] | None) -> BudgetBenchConfig | None:
    """The budgeted run ``argv`` asks for (``--budget``/``--budget-tokens``), or None."""
    config = parse_args(argv)
    parser = argparse.ArgumentParser(add_help=False)
    _budget_options(parser)
    args, _rest = parser.parse_known_args(argv)
    if args.budget is None and args.budget_tokens is None:
        return None
    return BudgetBenchConfig(
        tasks=config.tasks,
        limit=config.limit,
        policies=tuple(p.strip() for p in args.policies.split(",") if p.strip()),
        generations=args.budget,
        tokens=args.budget_tokens,
        model=config.model,
        temperature=config.temperature,
        seed=config.seed,
        max_tokens=config.max_tokens,
        out=config.out,
        cache_path=config.cache_path,
        cache_only=args.cache_only,
        threads=config.threads,
    )


def _executor_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--executor", choices=("asyncio", "ray"), default="asyncio")
    parser.add_argument("--ray-address", default=None, help="a Ray cluster (default: local Ray)")


def parse_executor(argv: list[str] | None) -> tuple[str, str | None]:
    """``--executor`` and ``--ray-address`` (the rest is :func:`parse_args`'s)."""
    parser = argparse.ArgumentParser(add_help=False)
    _executor_options(parser)
    args, _rest = parser.parse_known_args(argv)
    if args.ray_address is not None and args.executor != "ray":
        parser.error("--ray-address needs --executor ray")
    return args.executor, args.ray_address


def run(
    config: BenchConfig, executor: str = "asyncio", ray_address: str | None = None
) -> BenchReport:
    """Library entry: run the bench for ``config`` (here, or on Ray) and return the report."""
    return asyncio.run(refine_on(config, executor, ray_address))


def main(argv: list[str] | None = None) -> int:
    console = Console()
    try:
        budgeted = parse_budget(argv)
        if budgeted is not None:
            budget_report = asyncio.run(run_budget_bench(budgeted, progress=print))
            render_budget_report(
                budget_report, console if console.is_terminal else Console(width=200)
            )
            return 0
        config = parse_args(argv)
        report = run(config, *parse_executor(argv))
    except ClosedLoopError as exc:
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    # Tables are wide; a pipe or CI log would otherwise fold them to 80 columns.
    render_report(report, console if console.is_terminal else Console(width=200))
    return 0


if __name__ == "__main__":
    sys.exit(main())
