"""Calibration of the confidence sensors on the tools benchmark, one embedded model.

    nice python bench/tools_calibration.py --model qwen2.5-coder-0.5b --split eval \
        --budget-s 900 --k 3

Writes bench/results/tools/calibration-<model>.json (rewritten after every task, so a run
stopped early keeps what it read) and its reliability diagram PNG.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

from closedloop.models import LocalLlama, allow_real_model_calls
from closedloop_bench.tools._calibration import calibration_report, plot_reliability, read_task
from closedloop_bench.tools._command import interleave
from closedloop_bench.tools._format import load_tool_tasks
from closedloop_bench.tools._generate import DATA_DIR


async def _run(args: argparse.Namespace, out: Path) -> dict[str, object]:
    model = LocalLlama.builtin(args.model, n_threads=args.threads, prompt_cache=True)
    tasks = interleave(load_tool_tasks(DATA_DIR / f"{args.split}.jsonl"))
    started = time.perf_counter()
    readings = []
    report: dict[str, object] = {}
    for task in tasks[: args.limit]:
        if time.perf_counter() - started > args.budget_s:
            break
        readings.append(await read_task(task, model, k=args.k))
        report = calibration_report(
            args.model,
            readings,
            split=args.split,
            k=args.k,
            tasks_offered=len(tasks),
            command=(
                f"nice python bench/tools_calibration.py --model {args.model} --split "
                f"{args.split} --budget-s {args.budget_s:g} --k {args.k}"
            ),
        )
        out.write_text(json.dumps(report, indent=1) + "\n")
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--split", default="eval", choices=["dev", "eval"])
    parser.add_argument("--budget-s", type=float, default=900.0)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    out = Path(__file__).parent / "results" / "tools" / f"calibration-{args.model}.json"
    with allow_real_model_calls():
        report = asyncio.run(_run(args, out))
    if report:
        print(plot_reliability(report, out.with_suffix(".png")))
        overall = report["overall"]
        assert isinstance(overall, dict)
        for name, value in overall.items():
            if isinstance(value, dict):
                print(name, value["n"], value["auroc"], value["ece"])


if __name__ == "__main__":
    main()
