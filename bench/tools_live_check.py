"""The live check of the replay: the constrained single call and votes@3 run live, through
the benchmark's own strategies, on the first tasks of the interleaved order, beside the
replay's intervals on the same tasks.

    nice python bench/tools_live_check.py --model qwen2.5-coder-0.5b --limit 60

Writes bench/results/tools/live-check-<model>.json (--out to change); --bank defaults to
bench/results/tools/bank/<model>-eval.jsonl.gz.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from closedloop import ConfigurationError
from closedloop_bench.tools._generate import DATA_DIR
from closedloop_bench.tools._live_check import live_check
from closedloop_bench.tools._replay_command import RESULTS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--limit", type=int, default=60)
    parser.add_argument("--bank", type=Path, default=None)
    parser.add_argument("--tasks", type=Path, default=DATA_DIR / "eval.jsonl")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    raw = sys.argv[1:] if argv is None else argv
    name = args.model.replace(":", "-")
    bank = args.bank or RESULTS / "bank" / f"{args.model}-eval.jsonl.gz"
    out = args.out or RESULTS / f"live-check-{name}.json"
    command = "nice python bench/tools_live_check.py " + " ".join(shlex.quote(a) for a in raw)
    try:
        report = live_check(
            args.model,
            bank,
            args.tasks,
            limit=args.limit,
            threads=args.threads,
            command=command,
            progress=not args.no_progress,
        )
    except ConfigurationError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n")
    for strategy, row in report["strategies"].items():
        live, replay = row["live"], row["replay"]
        print(
            f"{strategy}: live {live['success']}/{live['n']} at {live['mean_seconds']:.2f} s; "
            f"replay {replay['success']}/{replay['n']} {replay['success_ci']} at "
            f"{replay['mean_seconds']:.2f} s {replay['mean_seconds_ci']}; success inside: "
            f"{row['success_inside']}, seconds inside: {row['seconds_inside']}"
        )
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
