"""The advanced-control benchmark: adaptive gains, pre-warm, tiered response
and the plain-language view, each beside plain closedloop in the same run.

    .venv/bin/python bench/advanced.py            # writes bench/results/advanced.json
    .venv/bin/python bench/advanced.py --quick    # a few episodes, to see it work

The logic lives in ``closedloop_bench.benchmarks._advanced``; the model is ``test:oracle``.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from closedloop_bench.benchmarks._advanced import (
    AdvancedConfig,
    render_advanced,
    run_advanced_bench,
)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its tables; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="4 tuning, 6 evaluation tasks")
    parser.add_argument("--profiles", default="seed000,harsh")
    parser.add_argument("--tune-per-domain", type=int, default=16)
    parser.add_argument("--eval-per-domain", type=int, default=30)
    parser.add_argument("--out", type=Path, default=Path("bench/results/advanced.json"))
    args = parser.parse_args(argv)
    config = AdvancedConfig(
        profiles=tuple(p for p in args.profiles.split(",") if p),
        tune_per_domain=4 if args.quick else args.tune_per_domain,
        min_tune_episodes=4 if args.quick else 8,
        eval_per_domain=6 if args.quick else args.eval_per_domain,
        out=args.out,
    )
    report = asyncio.run(run_advanced_bench(config))
    print(render_advanced(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
