"""Record the sample bank of one embedded model on one split of the tools benchmark.

    nice python bench/tools_bank.py --model qwen2.5-coder-0.5b --split eval --k 5

Writes bench/results/tools/bank/<model>-<split>.jsonl.gz: k samples of the constrained
single call per task (sample 0 greedy, the rest at --temperature), each with its logprob
sensors, the checker's verdict and its cost. A run that stops keeps every finished task;
the same command resumes after the last one. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

from closedloop.models import LocalLlama, allow_real_model_calls
from closedloop_bench.tools._bank import BankMismatchError, record_bank
from closedloop_bench.tools._command import interleave
from closedloop_bench.tools._format import load_tool_tasks
from closedloop_bench.tools._generate import DATA_DIR

RESULTS = Path(__file__).parent / "results" / "tools" / "bank"


def _command(args: argparse.Namespace) -> str:
    return (
        f"nice python bench/tools_bank.py --model {args.model} --split {args.split} "
        f"--k {args.k} --temperature {args.temperature:g} --max-tokens {args.max_tokens}"
    )


async def _run(args: argparse.Namespace, path: Path) -> int:
    tasks = interleave(load_tool_tasks(DATA_DIR / f"{args.split}.jsonl"))[: args.limit]
    model = LocalLlama.builtin(args.model, n_threads=args.threads, prompt_cache=True)
    header = {
        "model": args.model,
        "split": args.split,
        "k": args.k,
        "temperature": args.temperature,
        "max_tokens": args.max_tokens,
        "prompt": "strict",
        "threads": args.threads,
        "command": _command(args),
    }
    started = time.perf_counter()

    def progress(count: int, row: dict[str, Any]) -> None:
        ok = sum(s["success"] for s in row["samples"])
        spent = sum(s["seconds"] for s in row["samples"])
        elapsed = time.perf_counter() - started
        print(
            f"[{count}/{len(tasks)}] {row['task_id']}: {ok}/{args.k} right, "
            f"{spent:.1f} s (elapsed {elapsed / 60:.1f} min)",
            file=sys.stderr,
            flush=True,
        )

    return await record_bank(path, tasks, model, header, progress=progress, budget_s=args.budget_s)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--split", default="eval", choices=["dev", "eval"])
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--max-tokens", type=int, default=160)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--limit", type=int, default=None, help="only the first N tasks")
    parser.add_argument("--budget-s", type=float, default=None, help="stop after this long")
    parser.add_argument("--out", type=Path, default=None, help="bank file (default: results)")
    args = parser.parse_args()
    if args.k < 1:
        parser.error(f"--k must be at least 1, got {args.k}")
    path = args.out or RESULTS / f"{args.model}-{args.split}.jsonl.gz"
    try:
        with allow_real_model_calls():
            count = asyncio.run(_run(args, path))
    except BankMismatchError as exc:
        parser.exit(2, f"tools_bank: {exc}\n")
    print(f"{path}: {count} tasks")


if __name__ == "__main__":
    main()
