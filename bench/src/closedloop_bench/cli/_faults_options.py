"""The options of ``closedloop bench faults``, one named type each, so that the command's
signature reads as a list of settings."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

Model = Annotated[
    str, typer.Option(help="Model spec, or test:oracle (a perfect planner with no control).")
]

Quick = Annotated[
    bool,
    typer.Option(
        "--quick",
        help="A few episodes per cell, on steps 1,3,5,7 and profile seed000 unless "
        "--steps / --profiles / --episodes say otherwise.",
    ),
]

Warnings = Annotated[
    bool,
    typer.Option(
        "--warnings",
        help="The early-warning study instead: closedloop_adrc on regimes@0.1,0.2, steps "
        "5,7,10, 8 episodes per cell (2 with --quick) unless the options say otherwise; "
        "writes early_warning.json to --out (default bench/results/faults).",
    ),
]

Strategies = Annotated[
    str | None,
    typer.Option(
        help="Comma-separated: open_loop, fixed_retries, langgraph, closedloop_pid, "
        "closedloop_adrc, closedloop_frozen (the same loop, controller frozen), and the "
        "other closedloop_* rows. Default: those six (--warnings: closedloop_adrc)."
    ),
]

Profiles = Annotated[
    str | None,
    typer.Option(
        help="Comma-separated fault profiles: names, files, or NAME@λ for a profile with "
        "its regimes' onset rate λ (regimes@0.2); fault seeds follow a profile's name (a "
        "file's stem), not its path. Default: seed000 (none with --lambdas)."
    ),
]

Lambdas = Annotated[
    str | None,
    typer.Option(
        help="Comma-separated onset rates λ in [0, 1]: runs profile regimes@λ for each, "
        "besides --profiles; writes lambda.png (success against λ, and on minus frozen)."
    ),
]

NoFrontier = Annotated[
    bool,
    typer.Option(
        "--no-frontier",
        help="Skip the retry-budget sweep run after the table (sweep.json, frontier.png).",
    ),
]

NoWarnings = Annotated[
    bool,
    typer.Option(
        "--no-warnings",
        help="Skip the early-warning study run after the table (early_warning.json).",
    ),
]

Steps = Annotated[
    str | None, typer.Option(help="Comma-separated step counts (1-10). Default: 1-10.")
]

Episodes = Annotated[
    int | None, typer.Option(help="Episodes per cell (default: every task of that step count).")
]

Split = Annotated[str, typer.Option(help="Task split: eval or dev.")]

Tasks = Annotated[
    Path | None,
    typer.Option(
        help="A JSONL file of your own world tasks instead of --split (docs/how-to/your-tasks.md)."
    ),
]

Explain = Annotated[
    bool,
    typer.Option("--explain", help="List the tasks (checked on a fault-free world); no model."),
]

Seed = Annotated[int, typer.Option(help="Base of every episode's fault seed.")]

LatencyScale = Annotated[
    float, typer.Option(help="Multiplies the worlds' injected latencies (0: none).")
]

Concurrency = Annotated[int, typer.Option(help="Episodes in flight at once.")]

Attempts = Annotated[int, typer.Option(help="Retry budget per call, for everyone.")]

ToolTimeout = Annotated[
    float, typer.Option(help="Timeout of every HTTP call, s; 0: the tools' adaptive timeout.")
]

ClosedLoop = Annotated[
    str | None,
    typer.Option(
        help="The closed loop's planner: react (the model proposes every step), "
        "reference (the reference agents: rules, the model past a gate) or auto "
        "(reference for real models, react for test:oracle). Default: auto."
    ),
]

NoCache = Annotated[bool, typer.Option("--no-cache", help="Do not use the completion cache.")]

Executor = Annotated[
    str,
    typer.Option(
        help="asyncio (one event loop here) or ray (one Ray task per episode; needs the "
        "'ray' extra)."
    ),
]

RayAddress = Annotated[
    str | None,
    typer.Option(
        help="With --executor ray: an existing cluster ('auto', 'HOST:6379' or "
        "'ray://HOST:10001'); default: start a local Ray."
    ),
]

Out = Annotated[
    Path | None,
    typer.Option(
        help="Folder for report.json and curves.png (default runs/bench-faults; with "
        "--warnings, for early_warning.json, default bench/results/faults)."
    ),
]
