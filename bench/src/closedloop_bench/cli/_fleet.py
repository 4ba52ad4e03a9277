"""``closedloop bench fleet``: many agents against one simulated rate-limited provider."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from ..fleet import SCHEDULES
from ._bench import app

_err = Console(stderr=True)


def _seeds(text: str) -> tuple[int, ...]:
    try:
        seeds = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise typer.BadParameter(
            f"{text!r}: give comma-separated integers", param_hint="--seeds"
        ) from None
    if not seeds:
        raise typer.BadParameter("give at least one seed", param_hint="--seeds")
    return seeds


def _schedules(text: str) -> tuple[str, ...]:
    names = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [n for n in names if n not in SCHEDULES]
    if unknown or not names:
        raise typer.BadParameter(
            f"unknown {unknown}; known: {', '.join(SCHEDULES)}", param_hint="--schedules"
        )
    return names


@app.command("fleet")
def fleet(
    seeds: Annotated[
        str, typer.Option(help="Comma-separated seeds; every strategy runs on each (paired).")
    ] = "10,11,12,13,14,15,16,17,18,19",
    schedules: Annotated[
        str, typer.Option(help=f"Comma-separated schedules: {', '.join(SCHEDULES)}.")
    ] = ",".join(SCHEDULES),
    clients: Annotated[
        int | None,
        typer.Option(min=10, max=500, help="Concurrent agents (default: each schedule's own)."),
    ] = None,
    initial_limit: Annotated[
        float,
        typer.Option(
            min=1.0,
            max=1000.0,
            help="The limiters' initial limit, where a frozen one stays (default 20).",
        ),
    ] = 20.0,
    out: Annotated[
        Path, typer.Option(help="Folder for report.json and one PNG per schedule.")
    ] = Path("bench/results/fleet"),
) -> None:
    """Strategies × capacity schedules on the simulated provider (virtual clock, seeded).

    Progress goes to stderr; a run stopped part-way resumes from the cells it finished
    (kept in OUT/.fleet-progress.jsonl until the report is written)."""
    from ..fleet._bench import FleetConfig, plot_fleet, run_fleet, write_report
    from ..fleet._resume import Checkpoint

    names = _schedules(schedules)
    config = FleetConfig(
        seeds=_seeds(seeds), schedules=names, clients=clients, initial_limit=initial_limit
    )
    command = f"closedloop bench fleet --seeds {','.join(map(str, config.seeds))}"
    command += f" --schedules {','.join(names)}" + (f" --clients {clients}" if clients else "")
    command += f" --initial-limit {initial_limit:g} --out {out}"
    checkpoint = Checkpoint(out / ".fleet-progress.jsonl", {"command": command})
    started = time.monotonic()
    report, traces = run_fleet(
        config,
        progress=lambda line: _err.print(f"[{time.monotonic() - started:5.0f} s] {line}"),
        checkpoint=checkpoint,
    )
    path = write_report(report, out, command)
    for png in plot_fleet(traces, names, out):
        _err.print(f"wrote {png}")
    checkpoint.done()
    _err.print(f"wrote {path}")


@app.command("fleet-sensor")
def fleet_sensor(
    seeds: Annotated[
        str, typer.Option(help="Comma-separated seeds (the fleet report's by default).")
    ] = "10,11,12,13,14,15,16,17,18,19",
    out: Annotated[Path, typer.Option(help="Folder for sensor.json.")] = Path(
        "bench/results/fleet"
    ),
) -> None:
    """AUROC of the limiters' input signals for predicting a 429 or refusal (virtual clock)."""
    from ..fleet._sensor import run_sensor, write_sensor

    started = time.monotonic()
    report = run_sensor(
        _seeds(seeds),
        progress=lambda line: _err.print(f"[{time.monotonic() - started:5.0f} s] {line[:160]}"),
    )
    path = write_sensor(report, out, f"closedloop bench fleet-sensor --seeds {seeds} --out {out}")
    _err.print(f"wrote {path}")


@app.command("fleet-shared")
def fleet_shared(
    seeds: Annotated[str, typer.Option(help="Comma-separated seeds.")] = (
        "10,11,12,13,14,15,16,17,18,19"
    ),
    schedules: Annotated[
        str, typer.Option(help=f"Comma-separated schedules: {', '.join(SCHEDULES)}.")
    ] = "step,burst",
    redis: Annotated[
        str | None, typer.Option(help="A Redis URL (default: a throwaway redis-server).")
    ] = None,
    out: Annotated[Path, typer.Option(help="Folder for shared.json.")] = Path(
        "bench/results/fleet"
    ),
) -> None:
    """Two worker processes sharing the limiter through Redis against one worker, on the
    simulator's clock (lock step: a seeded run replays). Progress on stderr; a stopped run
    resumes from OUT/.shared-progress.jsonl."""
    from ..fleet._resume import Checkpoint
    from ..fleet._shared import redis_server
    from ..fleet._workers import run_shared_workers, write_shared

    names = _schedules(schedules)
    seed_list = _seeds(seeds)
    command = (
        f"closedloop bench fleet-shared --seeds {','.join(map(str, seed_list))} "
        f"--schedules {','.join(names)} --out {out}"
    )
    checkpoint = Checkpoint(out / ".shared-progress.jsonl", {"command": command})
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        url = redis or stack.enter_context(redis_server())
        report = run_shared_workers(
            seed_list,
            names,
            redis_url=url,
            progress=lambda line: _err.print(f"[{time.monotonic() - started:5.0f} s] {line}"),
            checkpoint=checkpoint,
        )
    path = write_shared(report, out, command)
    checkpoint.done()
    _err.print(f"wrote {path}")
