"""The loop's own cost per step: closedloop vs a plain while loop vs LangGraph.

    .venv/bin/python bench/overhead.py
    .venv/bin/python bench/overhead.py --steps 10 --rounds 50

The same as ``closedloop bench overhead``; the logic lives in ``closedloop_bench.benchmarks``.
"""

from __future__ import annotations

import sys

from rich.console import Console

from closedloop import ClosedLoopError
from closedloop_bench.cli._bench import app


def main(argv: list[str] | None = None) -> int:
    """Run ``closedloop bench overhead`` with ``argv``; returns the exit status."""
    args = ["overhead", *(sys.argv[1:] if argv is None else argv)]
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
