"""Feedback strategies side by side on real code tasks (issue 7).

    .venv/bin/python bench/refine.py --tasks seed --rounds 3
    .venv/bin/python bench/refine.py --tasks humaneval --limit 20 --strategies self_refine,pid

The same as ``closedloop bench refine``; the logic lives in ``closedloop.harness``
(``BenchConfig``, ``run_refine_bench``, ``render_report``). Writes ``results.json`` and
``pass_rate_by_round.png`` under ``--out``. The loopgain column needs loopgain 0.6.5.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from rich.console import Console

from closedloop import ClosedLoopError
from closedloop.harness import BenchConfig, BenchReport, render_report, run_refine_bench


def parse_args(argv: list[str] | None) -> BenchConfig:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", choices=("seed", "humaneval"), default="seed")
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--strategies", default="blind_retry,self_refine,pid,pid+interval2")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--model", default="local:qwen2.5-coder-0.5b")
    parser.add_argument("--temperature", type=float, default=0.2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-tokens", type=int, default=768)
    parser.add_argument("--no-loopgain", action="store_true")
    parser.add_argument("--out", type=Path, default=Path("runs/bench-refine"))
    args = parser.parse_args(argv)
    return BenchConfig(
        tasks=args.tasks,
        limit=args.limit,
        strategies=tuple(s.strip() for s in args.strategies.split(",") if s.strip()),
        rounds=args.rounds,
        model=args.model,
        temperature=args.temperature,
        seed=args.seed,
        max_tokens=args.max_tokens,
        loopgain=not args.no_loopgain,
        out=args.out,
    )


def run(config: BenchConfig) -> BenchReport:
    """Library entry: run the bench for ``config`` and return the report."""
    err = Console(stderr=True)
    return asyncio.run(run_refine_bench(config, progress=lambda m: err.print(m, highlight=False)))


def main(argv: list[str] | None = None) -> int:
    try:
        config = parse_args(argv)
        report = run(config)
    except ClosedLoopError as exc:
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    console = Console()
    # Tables are wide; a pipe or CI log would otherwise fold them to 80 columns.
    render_report(report, console if console.is_terminal else Console(width=200))
    return 0


if __name__ == "__main__":
    sys.exit(main())
