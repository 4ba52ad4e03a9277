"""The faults benchmark: open loop, fixed retries, LangGraph and closedloop.

    .venv/bin/python bench/faults.py --quick
    .venv/bin/python bench/faults.py --profiles harsh --lambdas 0,0.1,0.2,0.3,0.5
    .venv/bin/python bench/faults.py --profiles seed000,harsh --no-frontier --no-warnings
    .venv/bin/python bench/faults.py --quick --model local:qwen2.5-coder-0.5b
    .venv/bin/python bench/faults.py --model openai-compatible:http://127.0.0.1:8080/v1#name
    .venv/bin/python bench/faults.py --quick --executor ray            # a local Ray
    .venv/bin/python bench/faults.py --executor ray --ray-address auto # a running cluster

The same as ``closedloop bench faults`` (every option is the command's); the logic lives in
``closedloop_bench.benchmarks``. Writes under ``--out``: ``report.json`` (the table, the
claims judged against the open loop, tenacity and the frozen loop, on against frozen per
profile and λ) and ``curves.png``; ``lambda.png`` with ``--lambdas``; then, unless skipped,
the retry-budget frontier (``sweep.json``, ``frontier.png``) and the early-warning study
(``early_warning.json``).
"""

from __future__ import annotations

import sys

from rich.console import Console

from closedloop import ClosedLoopError
from closedloop_bench.cli._bench import app


def main(argv: list[str] | None = None) -> int:
    """Run ``closedloop bench faults`` with ``argv``; returns the exit status."""
    args = ["faults", *(sys.argv[1:] if argv is None else argv)]
    try:
        app(args=args, prog_name="closedloop bench", standalone_mode=True)
    except ClosedLoopError as exc:
        Console(stderr=True).print(f"error: {type(exc).__name__}: {exc}", highlight=False)
        return 2
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
