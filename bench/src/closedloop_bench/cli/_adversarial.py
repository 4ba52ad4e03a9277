"""``closedloop bench adversarial``: bad input, faults and attacks, one JSON report.

The reliability table (docs/benchmarks/reliability.md) comes from ``--cases 10000``; the
default is a CI-sized run. The report records the command line that rewrites exactly it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ._bench import _err, _out, app

DEFAULT_OUT = Path("bench/results/adversarial.json")


@app.command("adversarial")
def adversarial(
    cases: Annotated[
        int, typer.Option(min=4, help="Generated bad inputs in all (at least 4).")
    ] = 400,
    episodes: Annotated[int, typer.Option(min=1, help="Episodes per world fault cell.")] = 2,
    tasks: Annotated[
        int,
        typer.Option(
            min=3,
            help="Tasks per store fault (disk full, Redis down); at least 3, or a full "
            "disk half-way is never met.",
        ),
    ] = 8,
    seed: Annotated[int, typer.Option(help="Hypothesis seed.")] = 0,
    crash_tests: Annotated[
        bool, typer.Option(help="Run the SIGKILL crash tests (from a source checkout).")
    ] = True,
    out: Annotated[Path, typer.Option(help="The JSON report to write.")] = DEFAULT_OUT,
) -> None:
    """The adversarial suite: generated bad input, world and store faults, attacks."""
    from ..benchmarks._adversarial import reliability_table, run_adversarial

    repo = _checkout() if crash_tests else None
    if crash_tests and repo is None:
        _err.print("the crash tests need a source checkout (tests/); running without them")
    report = run_adversarial(cases, out, episodes=episodes, tasks=tasks, repo=repo, salt=seed)
    _out.print(reliability_table(report), highlight=False, markup=False)
    _out.print(f"\n{report['wall_s']} s; written to {out}", highlight=False)


def _checkout() -> Path | None:
    """The source checkout the crash tests run from: the working directory when it is one."""
    here = Path.cwd()
    return here if (here / "tests").is_dir() and (here / "src" / "closedloop").is_dir() else None
