"""The adversarial suite: bad input, faults and attacks; writes bench/results/adversarial.json.

Usage: closedloop bench adversarial (or python bench/adversarial.py) [--cases N] [--episodes E] [--tasks T] [--out PATH]
The reliability table (docs/benchmarks/reliability.md) comes from ``--cases 10000``; the default
is a CI-sized run.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from closedloop_bench.benchmarks._adversarial import reliability_table, run_adversarial

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=400, help="generated bad inputs in all")
    parser.add_argument("--episodes", type=int, default=2, help="episodes per world fault cell")
    parser.add_argument("--tasks", type=int, default=8, help="tasks per store fault")
    parser.add_argument("--seed", type=int, default=0, help="Hypothesis seed")
    parser.add_argument(
        "--no-crash-tests", action="store_true", help="skip running the SIGKILL crash tests"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "adversarial.json")
    args = parser.parse_args()
    if args.tasks < 1 or args.episodes < 1 or args.cases < 4:
        parser.error("--tasks and --episodes need at least 1, --cases at least 4")
    report = run_adversarial(
        args.cases,
        args.out,
        episodes=args.episodes,
        tasks=args.tasks,
        repo=None if args.no_crash_tests else ROOT,
        salt=args.seed,
    )
    print(reliability_table(report))
    print(f"\n{report['wall_s']} s; written to {args.out}")


if __name__ == "__main__":
    main()
