"""The regression ESO's cost per step: the O(1) running sums against the batch refit.

    .venv/bin/python bench/eso_step.py           # writes bench/results/overhead/eso_step.json
    .venv/bin/python bench/eso_step.py --quick   # fewer steps, to see it work

Both estimators take the same random stream of (control, setpoint, quality) in one
process. ``batch`` is the earlier update, written out here: every step it fits
``q ≈ a·v + b·w + c`` over the window and sums the recency-weighted disturbance over the
whole window again (O(window) a step). ``running`` is ``RegressionESO.update``: two exact
running sums, the fit left to whoever reads ``coefficients`` (O(1) a step). The figure is
the median over repeats of the mean wall time per update, in microseconds; the largest
difference between the two estimates over the stream is reported beside it.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from closedloop._validation import require_finite
from closedloop.control import RegressionESO
from closedloop.control._regression_eso import _closed_form, _min_norm

OUT = Path(__file__).resolve().parent / "results" / "overhead" / "eso_step.json"


class BatchESO(RegressionESO):
    """The earlier update: refit and re-sum the whole window on every step."""

    def update(self, control: float, setpoint: float, quality: float) -> float:
        v = require_finite("control", control)
        w = require_finite("setpoint", setpoint)
        q = require_finite("quality", quality)
        self._samples.append((v, w, q))
        n = len(self._samples)
        if n < self.min_samples:
            self._f_est = 0.0
            return 0.0
        self._coefficients = _closed_form(self._samples, n) or _min_norm(self._samples)
        total = sum(k * self._disturbance(s) for k, s in enumerate(self._samples, start=1))
        self._f_est = min(1.0, max(0.0, 2.0 * total / (n * (n + 1))))
        return self._f_est


def _stream(steps: int, seed: int) -> list[tuple[float, float, float]]:
    rng = random.Random(seed)
    return [(rng.random(), rng.uniform(0.6, 1.0), rng.random()) for _ in range(steps)]


def _per_step_us(make: type[RegressionESO], window: int, stream: list[Any]) -> float:
    eso = make(window=window, min_samples=min(5, window))
    update = eso.update
    start = time.perf_counter()
    for v, w, q in stream:
        update(v, w, q)
    return (time.perf_counter() - start) / len(stream) * 1e6


def measure(windows: list[int], steps: int, repeats: int) -> list[dict[str, Any]]:
    rows = []
    for window in windows:
        stream = _stream(steps, seed=window)
        times: dict[str, list[float]] = {"batch": [], "running": []}
        for _ in range(repeats):
            times["batch"].append(_per_step_us(BatchESO, window, stream))
            times["running"].append(_per_step_us(RegressionESO, window, stream))
        old, new = BatchESO(window=window), RegressionESO(window=window)
        gap = max(abs(old.update(*s) - new.update(*s)) for s in stream)
        batch, running = (statistics.median(times[k]) for k in ("batch", "running"))
        rows.append(
            {
                "window": window,
                "batch_us_per_step": round(batch, 3),
                "running_us_per_step": round(running, 3),
                "speedup": round(batch / running, 2),
                "max_abs_difference": gap,
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps, no file written")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    steps, repeats = (1_000, 1) if args.quick else (5_000, 3)
    rows = measure([15, 64, 256], steps, repeats)
    result = {
        "command": "python bench/eso_step.py",
        "what": "wall time per RegressionESO update, median of repeats (microseconds)",
        "steps_per_repeat": steps,
        "repeats": repeats,
        "python": sys.version.split()[0],
        "machine": platform.machine(),
        "rows": rows,
    }
    text = json.dumps(result, indent=2) + "\n"
    if args.quick:
        print(text, end="")
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
