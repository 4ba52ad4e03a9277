"""The tool-calling benchmark: strategies × models on the generated tasks or a user's file.

    python bench/tools.py --split dev --limit 40 --models local:smollm2-135m \
        --strategies open_loop,strict,reask@2,votes@3,closedloop,frozen
    python bench/tools.py --tasks my_tasks.jsonl --models test:oracle
    python bench/tools.py --regenerate      # rewrite the committed dev and eval sets

The same command as ``closedloop bench tools``. Writes the report JSON (and the
success–cost plane PNG next to it) under bench/results/tools/ and prints the table.
``--limit N`` takes the first N tasks after interleaving the families, so a short run
still covers all of them; ``--family single,choose`` keeps those families only (before
``--limit``). ``--models`` lists models weakest first: ``strong`` runs on the
last one.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from closedloop import ConfigurationError
from closedloop_bench.tools import strategy_names
from closedloop_bench.tools._command import ToolsCommand, interleave, run_tools_command

__all__ = ["interleave", "main", "parser"]

RESULTS = Path(__file__).resolve().parent / "results" / "tools"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="bench/tools.py", description=__doc__.split("\n")[0])
    source = p.add_mutually_exclusive_group()
    source.add_argument(
        "--tasks", type=Path, help="a JSONL task file (format: docs/how-to/your-tasks.md)"
    )
    source.add_argument(
        "--split", choices=("dev", "eval"), default="dev", help="a generated split (default dev)"
    )
    p.add_argument("--limit", type=int, default=None, help="run the first N tasks only")
    p.add_argument(
        "--family",
        default=None,
        help="comma-separated families to keep (single,choose: the one-call tasks)",
    )
    p.add_argument("--models", default="test:oracle", help="comma-separated specs, weakest first")
    p.add_argument(
        "--strategies",
        default="open_loop,strict",
        help=f"comma-separated; runnable now: {', '.join(strategy_names())}",
    )
    p.add_argument("--out", type=Path, default=None, help="report JSON path")
    p.add_argument(
        "--cost", choices=("tokens", "wall_s"), default="tokens", help="the cost axis of the plane"
    )
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="threads for local models (1 is fastest on shared cores)",
    )
    p.add_argument(
        "--budget-s",
        type=float,
        default=None,
        help="stop before the next task after this many seconds",
    )
    p.add_argument("--no-plot", action="store_true", help="skip the PNG")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--regenerate",
        action="store_true",
        help="rewrite the generated dev and eval sets, then stop",
    )
    p.add_argument("--explain", action="store_true", help="list the tasks, then stop (no model)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    options = ToolsCommand(
        tasks=args.tasks,
        split=args.split,
        limit=args.limit,
        families=args.family,
        models=args.models,
        strategies=args.strategies,
        out=args.out,
        results=RESULTS,
        cost=args.cost,
        threads=args.threads,
        budget_s=args.budget_s,
        plot=not args.no_plot,
        progress=not args.no_progress,
        regenerate=args.regenerate,
        explain=args.explain,
    )
    try:
        run_tools_command(options)
    except ConfigurationError as exc:
        # Bad input (a task file line, a spec, a strategy name): one line, before any call.
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
