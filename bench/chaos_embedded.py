"""Chaos on the embedded default: SIGKILL one SQLite ``closedloop serve`` again and again.

Usage: python bench/chaos_embedded.py [--kills 50] [--seed 0] [--out bench/results/chaos-embedded.json]
Each cycle restarts the service on the same store, waits for the runs the last kill
interrupted to finish with nobody asking (bound: 10 s from the restart), posts new runs
with irreversible effects (a quarter repeat an earlier Idempotency-Key) and kills the
process after a random delay. The report counts runs done or handed over, effects in the
world, duplicated and lost effects (both must be 0) and the seconds to settle.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from closedloop_bench.benchmarks._chaos_embedded import EmbeddedChaosPlan, run_embedded_chaos

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=50, help="SIGKILLs (each one restart)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--out", type=Path, default=ROOT / "bench" / "results" / "chaos-embedded.json"
    )
    args = parser.parse_args()
    if args.kills < 1:
        parser.error("--kills must be at least 1")
    plan = EmbeddedChaosPlan(kills=args.kills, seed=args.seed)
    with tempfile.TemporaryDirectory(prefix="chaos-embedded-") as scratch:
        report = run_embedded_chaos(Path(scratch), plan)
    report["command"] = f"python bench/chaos_embedded.py --kills {args.kills} --seed {args.seed}"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "plan"}, indent=2))


if __name__ == "__main__":
    main()
