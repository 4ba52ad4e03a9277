"""Cost of the control kernel itself: microseconds per update, median of many repeats.

    .venv/bin/python bench/control_overhead.py [--out bench/results/control_overhead.json]

Targets: PID <= 2 us per update, RegressionESO <= 50 us per update.
Each figure is the median over repeats of (batch time / batch size), so a noisy
machine moves the spread, not the median.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.table import Table

from closedloop.control import LADRC, PID, IncrementalPID, LyapunovMonitor, RegressionESO


def _per_call_us(
    make: Callable[[], Callable[[], object]], *, batch: int, repeats: int
) -> dict[str, float]:
    samples: list[float] = []
    for _ in range(repeats):
        call = make()
        start = time.perf_counter_ns()
        for _ in range(batch):
            call()
        samples.append((time.perf_counter_ns() - start) / batch / 1000.0)
    samples.sort()
    return {
        "median_us": statistics.median(samples),
        "p10_us": samples[len(samples) // 10],
        "p90_us": samples[(len(samples) * 9) // 10],
    }


def _pid_case() -> Callable[[], object]:
    pid = PID(0.8, 0.05, 0.3, setpoint=0.0, output_limits=(0.0, 1.0))
    rng = random.Random(1)
    values = [rng.random() for _ in range(1024)]
    state = {"i": 0}

    def call() -> object:
        i = state["i"] = (state["i"] + 1) & 1023
        return pid(values[i], dt=0.1)

    return call


def _simple_pid_case() -> Callable[[], object]:
    from simple_pid import PID as SimplePID  # dev dependency: the reference implementation

    pid = SimplePID(0.8, 0.05, 0.3, setpoint=0.0, output_limits=(0.0, 1.0), sample_time=None)
    rng = random.Random(1)
    values = [rng.random() for _ in range(1024)]
    state = {"i": 0}

    def call() -> object:
        i = state["i"] = (state["i"] + 1) & 1023
        return pid(values[i], dt=0.1)

    return call


def _ipid_case() -> Callable[[], object]:
    pid = IncrementalPID(0.8, 0.05, 0.3, setpoint=0.0, output_limits=(0.0, 1.0))
    rng = random.Random(2)
    values = [rng.random() for _ in range(1024)]
    state = {"i": 0}

    def call() -> object:
        i = state["i"] = (state["i"] + 1) & 1023
        return pid(values[i], dt=0.1)

    return call


def _eso_case() -> Callable[[], object]:
    eso = RegressionESO(window=15, min_samples=5)
    rng = random.Random(3)
    triples = [(rng.random(), rng.random(), rng.random()) for _ in range(1024)]
    for v, w, q in triples[:15]:
        eso.update(v, w, q)
    state = {"i": 0}

    def call() -> object:
        i = state["i"] = (state["i"] + 1) & 1023
        v, w, q = triples[i]
        return eso.update(v, w, q)

    return call


def _ladrc_case() -> Callable[[], object]:
    ladrc = LADRC(1, 1.0, 4.0, 40.0, 0.001, output_limits=(-10.0, 10.0))
    y = {"y": 0.0}

    def call() -> object:
        u = ladrc(1.0, y["y"])
        y["y"] += 0.001 * (-y["y"] + u)
        return u

    return call


def _lyapunov_case() -> Callable[[], object]:
    mon = LyapunovMonitor(target=1.0, patience=1_000_000_000)
    rng = random.Random(4)
    scores = [rng.random() for _ in range(1024)]
    state = {"i": 0}

    def call() -> object:
        i = state["i"] = (state["i"] + 1) & 1023
        return mon.observe(scores[i])

    return call


CASES: dict[str, tuple[Callable[[], Callable[[], object]], float | None]] = {
    "PID update": (_pid_case, 2.0),
    "simple-pid 2.0.1 update (reference)": (_simple_pid_case, None),
    "IncrementalPID update": (_ipid_case, None),
    "RegressionESO update (window 15)": (_eso_case, 50.0),
    "LADRC step (order 1)": (_ladrc_case, None),
    "LyapunovMonitor observe": (_lyapunov_case, None),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("bench/results/control_overhead.json"))
    parser.add_argument("--batch", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=51)
    args = parser.parse_args(argv)

    rows = []
    for name, (make, target) in CASES.items():
        stats = _per_call_us(make, batch=args.batch, repeats=args.repeats)
        rows.append(
            {
                "case": name,
                **stats,
                "target_us": target,
                "meets_target": None if target is None else stats["median_us"] <= target,
            }
        )
    report = {
        "benchmark": "control_overhead",
        "python": sys.version.split()[0],
        "machine": platform.machine(),
        "batch": args.batch,
        "repeats": args.repeats,
        "results": rows,
    }
    by_case = {r["case"]: r["median_us"] for r in rows}
    report["pid_vs_simple_pid_ratio"] = (
        by_case["PID update"] / by_case["simple-pid 2.0.1 update (reference)"]
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))

    table = Table(title="Control kernel overhead (µs per call, median of repeats)")
    for col in ("case", "median µs", "p10 µs", "p90 µs", "target µs", "meets"):
        table.add_column(col, justify="left" if col == "case" else "right")
    for r in rows:
        table.add_row(
            r["case"],
            f"{r['median_us']:.2f}",
            f"{r['p10_us']:.2f}",
            f"{r['p90_us']:.2f}",
            "—" if r["target_us"] is None else f"≤ {r['target_us']:g}",
            "—" if r["meets_target"] is None else ("yes" if r["meets_target"] else "NO"),
        )
    Console().print(table)
    print(f"closedloop PID / simple-pid time ratio: {report['pid_vs_simple_pid_ratio']:.2f}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
