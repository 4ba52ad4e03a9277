"""Replay strategies from the sample banks: the success–cost plane, the shifted stream and
the calibration of the sensors, in seconds and without a model.

    python bench/tools_replay.py \
        --bank bench/results/tools/bank/qwen2.5-coder-0.5b-eval.jsonl.gz \
        --weak-bank bench/results/tools/bank/smollm2-135m-eval.jsonl.gz \
        --dev-bank bench/results/tools/bank/qwen2.5-coder-0.5b-dev.jsonl.gz \
        --dev-weak-bank bench/results/tools/bank/smollm2-135m-dev.jsonl.gz

Writes plane.json, stream.json and calibration-bank.json (each with its PNG) under
--out-dir (bench/results/tools by default); each JSON records the command that rewrites it.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from closedloop import ConfigurationError
from closedloop_bench.tools._generate import DATA_DIR
from closedloop_bench.tools._replay_command import RESULTS, ReplayOptions, run_replay


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bank", type=Path, required=True, help="the strong model's bank")
    parser.add_argument("--weak-bank", type=Path, default=None, help="the weak model's bank")
    parser.add_argument("--tasks", type=Path, default=DATA_DIR / "eval.jsonl")
    parser.add_argument(
        "--dev-bank",
        type=Path,
        default=None,
        help="the strong model's bank on the development split: the stream's fixed "
        "threshold and a controller's gains are chosen on it",
    )
    parser.add_argument(
        "--dev-weak-bank", type=Path, default=None, help="the weak model's development bank"
    )
    parser.add_argument("--dev-tasks", type=Path, default=DATA_DIR / "dev.jsonl")
    parser.add_argument("--out-dir", type=Path, default=RESULTS)
    parser.add_argument("--alpha", type=float, default=0.1, help="the risk target")
    parser.add_argument("--window", type=int, default=40, help="accepted calls per rolling error")
    args = parser.parse_args(argv)
    raw = sys.argv[1:] if argv is None else argv
    command = "python bench/tools_replay.py " + " ".join(shlex.quote(a) for a in raw)
    options = ReplayOptions(
        bank=args.bank,
        weak_bank=args.weak_bank,
        tasks=args.tasks,
        dev_bank=args.dev_bank,
        dev_weak_bank=args.dev_weak_bank,
        dev_tasks=args.dev_tasks,
        out_dir=args.out_dir,
        alpha=args.alpha,
        window=args.window,
        command=command,
    )
    try:
        run_replay(options)
    except ConfigurationError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
