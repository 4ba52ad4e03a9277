"""The tool-calling benchmark: strategies × models on the generated tasks or a user's file.

    python bench/tools.py --split dev --limit 40 --models local:smollm2-135m \
        --strategies open_loop,strict
    python bench/tools.py --tasks my_tasks.jsonl --models test:oracle
    python bench/tools.py --regenerate      # rewrite the committed dev and eval sets

Writes the report JSON (and the success–cost plane PNG next to it) under
bench/results/tools/ and prints the table. ``--limit N`` takes the first N tasks after
interleaving the families, so a short run still covers all of them.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path

from closedloop import ConfigurationError
from closedloop.models import allow_real_model_calls
from closedloop_bench.tools import (
    DATA_DIR,
    FAMILIES,
    Task,
    ToolsConfig,
    load_tasks,
    plot_plane,
    render_table,
    run_tools_bench,
    strategy_names,
    write_data,
    write_report,
)

RESULTS = Path(__file__).resolve().parent / "results" / "tools"


def interleave(tasks: Sequence[Task]) -> list[Task]:
    """The tasks with the families taken in turn (single, choose, ... single, ...)."""
    by_family = {f: [t for t in tasks if t.family == f] for f in FAMILIES}
    out: list[Task] = []
    for index in range(max((len(v) for v in by_family.values()), default=0)):
        out.extend(group[index] for group in by_family.values() if index < len(group))
    return out


def _csv(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="closedloop bench tools", description=__doc__.split("\n")[0])
    source = p.add_mutually_exclusive_group()
    source.add_argument("--tasks", type=Path, help="a JSONL task file (format: README)")
    source.add_argument(
        "--split", choices=("dev", "eval"), default="dev", help="a generated split (default dev)"
    )
    p.add_argument("--limit", type=int, default=None, help="run the first N tasks only")
    p.add_argument("--models", default="test:oracle", help="comma-separated model specs")
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
    return p


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(argv)
    except ConfigurationError as exc:
        # Bad input (a task file line, a spec, a strategy name): one line, before any call.
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _main(argv: Sequence[str] | None) -> int:
    args = parser().parse_args(argv)
    if args.regenerate:
        for split, path in write_data(DATA_DIR).items():
            print(f"{split}: {path}")
        return 0
    if args.limit is not None and args.limit < 1:
        print(f"--limit={args.limit}: must be at least 1", file=sys.stderr)
        return 2
    path = args.tasks if args.tasks is not None else DATA_DIR / f"{args.split}.jsonl"
    tasks = interleave(load_tasks(path))
    if args.limit is not None:
        tasks = tasks[: args.limit]
    label = f"{path.stem}" + (f" (first {len(tasks)})" if args.limit else "")
    config = ToolsConfig(
        models=_csv(args.models),
        strategies=_csv(args.strategies),
        source=label,
        progress=not args.no_progress,
        model_options={} if args.threads is None else {"n_threads": args.threads},
        budget_s=args.budget_s,
    )
    with allow_real_model_calls():
        report = asyncio.run(run_tools_bench(tasks, config))
    ran = max(report.meta["tasks_run"].values())
    if ran < len(tasks):
        report = dataclasses.replace(report, source=f"{label}, {ran} run within the budget")
    out = args.out or RESULTS / f"{path.stem}-{len(tasks)}.json"
    write_report(report, out)
    print(render_table(report))
    print(f"report: {out}")
    if not args.no_plot:
        png = plot_plane(report, out.with_suffix(".png"), cost=args.cost)
        print(f"plane: {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
