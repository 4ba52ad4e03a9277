"""What one ``closedloop bench faults`` run produces besides its table: the success–cost
frontier of fixed retry budgets (``sweep.json``, ``frontier.png``) and the early-warning
study on regime onsets (``early_warning.json``), each derived from the run's own settings
(model, seed, latency scale, concurrency, timeouts) so the three artefacts describe the
same benchmark.

The frontier runs where the budget target is stated, on regimes at λ ≥ 0.2: the run's own
profiles ``NAME@λ`` with λ ≥ 0.2 if it has any, else ``regimes@0.2``. The early warning
needs onsets: the run's profiles with regimes if it has any, else ``regimes@0.1`` and
``regimes@0.2``. ``quick`` shrinks both grids.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..world import load_profile
from ._budget import plot_budget, run_budget_sweep
from ._lambda import profile_lambda
from ._runner import FaultsConfig
from ._warnings import run_warnings, write_warnings

__all__ = [
    "FrontierPlan",
    "frontier_plan",
    "run_frontier",
    "run_study",
    "warnings_config",
]

FRONTIER_LAMBDA = 0.2
"""The onset rate from which the budget target is stated (λ ≥ 0.2)."""

ADAPTIVE = ("closedloop_pid", "closedloop_budget")
"""The adaptive rows read against the frontier of fixed settings."""


@dataclass(frozen=True, slots=True)
class FrontierPlan:
    """The sweep a run's frontier takes: its base config and the knobs' grid."""

    config: FaultsConfig
    attempts: tuple[int, ...]
    backoffs: tuple[float, ...]
    adaptive: tuple[str, ...] = ADAPTIVE


def frontier_plan(
    config: FaultsConfig,
    *,
    steps: tuple[int, ...] | None = None,
    episodes: int | None = None,
) -> FrontierPlan:
    """The frontier sweep of ``config`` (see the module); ``config.quick`` takes a reduced
    grid: attempts 1, 3, 5 at one backoff, steps 3 and 5, 3 episodes per cell. ``steps``
    and ``episodes`` (what the user asked of the run) replace the grid's own."""
    steep = [p for p in config.profiles if (profile_lambda(p) or ("", -1.0))[1] >= FRONTIER_LAMBDA]
    profiles = tuple(steep) or (f"regimes@{FRONTIER_LAMBDA:g}",)
    test = config.model.startswith("test:")
    if config.quick:
        grid: dict[str, Any] = {"steps": (3, 5), "episodes": 3 if test else 1}
        attempts: tuple[int, ...] = (1, 3, 5)
        backoffs: tuple[float, ...] = (0.5,)
    else:
        grid = {"steps": (1, 3, 5, 7), "episodes": 5}
        attempts, backoffs = (1, 2, 3, 4, 5, 6), (0.1, 0.5, 2.0)
    if steps is not None:
        grid["steps"] = steps
    if episodes is not None:
        grid["episodes"] = episodes
    base = dataclasses.replace(
        config,
        profiles=profiles,
        strategies=("fixed_retries",),
        out=None,
        command=config.command,  # the run that writes sweep.json beside its report
        **grid,
    )
    return FrontierPlan(base, attempts, backoffs)


def warnings_config(
    config: FaultsConfig,
    *,
    steps: tuple[int, ...] | None = None,
    episodes: int | None = None,
) -> FaultsConfig:
    """The early-warning study of ``config`` (see the module): closedloop_adrc on steps 5,
    7 and 10, 8 episodes per cell (2 with ``quick``), unless ``steps`` / ``episodes``
    (what the user asked of the run) say otherwise."""
    with_regimes = [p for p in config.profiles if load_profile(p).regimes is not None]
    return dataclasses.replace(
        config,
        profiles=tuple(with_regimes) or ("regimes@0.1", "regimes@0.2"),
        strategies=("closedloop_adrc",),
        steps=steps or (5, 7, 10),
        episodes=episodes or (2 if config.quick else 8),
        out=None,
        command=config.command,  # the run that writes early_warning.json beside its report
    )


async def run_frontier(
    plan: FrontierPlan,
    out: Path,
    *,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    progress: Callable[[str], None] | None = None,
) -> tuple[dict[str, Any], Path | None]:
    """Run the sweep of ``plan``; write ``sweep.json`` and ``frontier.png`` under ``out``
    (``progress`` is told a line per point of the sweep)."""
    sweep = await run_budget_sweep(
        plan.config,
        attempts=plan.attempts,
        backoffs=plan.backoffs,
        adaptive=plan.adaptive,
        sleep=sleep,
        progress=progress,
    )
    out.mkdir(parents=True, exist_ok=True)
    (out / "sweep.json").write_text(json.dumps(sweep, indent=2, default=str) + "\n")
    return sweep, plot_budget(sweep, out / "frontier.png")


async def run_study(
    config: FaultsConfig,
    out: Path,
    *,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[Mapping[str, Any], Path]:
    """Run the early-warning study of ``config`` (already :func:`warnings_config`'s) and
    write ``early_warning.json`` under ``out``."""
    report = await run_warnings(config, sleep=sleep, progress=progress)
    return report, write_warnings(report, out / "early_warning.json")
