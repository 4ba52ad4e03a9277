"""Where a loop's time per step goes: a deterministic profile of a few extra rounds.

``cProfile`` sees the thread it runs in, the event loop's; a store's own worker thread
(SQLite's) shows up only as the waits for it, so its CPU is measured on the side, as the
process's CPU time less the event-loop thread's. Profiled rounds are slower than timed ones
(every call pays the profiler), so each function's share of the profiled step is what to
read, and the µs are the profiled ones. The clock is the thread's CPU time.
"""

from __future__ import annotations

import cProfile
import pstats
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from rich.console import Console
from rich.table import Table

__all__ = ["ProfileLine", "StepProfile", "profile_loop", "render_profiles"]


class ProfileLine(BaseModel):
    """One function of a profiled step."""

    model_config = ConfigDict(frozen=True)
    function: str = Field(description="module path:line(name), shortened")
    calls_per_step: float
    self_us: float = Field(description="profiled µs per step inside the function itself")
    cumulative_us: float = Field(description="profiled µs per step inside it and its callees")
    share: float = Field(description="cumulative time over the whole profiled step")


class StepProfile(BaseModel):
    """The top functions of one loop's step, by cumulative and by self time."""

    model_config = ConfigDict(frozen=True)
    loop: str
    rounds: int
    profiled_us_per_step: float = Field(description="the event-loop thread, under the profiler")
    calls_per_step: float = Field(
        description="Python calls a step, every function's (the harness's frames left out): "
        "unlike the times, a count the machine's load does not move"
    )
    by_cumulative: list[ProfileLine]
    by_self: list[ProfileLine]


def _short(filename: str, line: int, name: str) -> str:
    path = Path(filename)
    parts = path.parts
    for anchor in ("closedloop", "site-packages", "python3.11"):
        if anchor in parts:
            index = len(parts) - 1 - parts[::-1].index(anchor)
            tail = "/".join(parts[index + (anchor != "closedloop") :])
            return f"{tail}:{line}({name})"
    return f"{filename}:{line}({name})" if line else name


async def profile_loop(
    name: str,
    run: Callable[[], Awaitable[Any]],
    reset: Callable[[], None],
    *,
    steps: int,
    rounds: int = 5,
    top: int = 25,
) -> StepProfile:
    """Profile ``rounds`` runs of ``run`` and keep the ``top`` functions (harness left out)."""
    # CPU time of this thread, not wall time: waiting on the store's thread is not work.
    profiler = cProfile.Profile(time.thread_time)
    for _ in range(rounds):
        reset()
        profiler.enable()
        try:
            await run()
        finally:
            profiler.disable()
    stats = pstats.Stats(profiler)
    table: dict[tuple[str, int, str], tuple[Any, ...]] = stats.stats  # type: ignore[attr-defined]
    per_step = steps * rounds
    total = sum(entry[2] for entry in table.values())  # every function's self time
    lines: list[ProfileLine] = []
    calls_in_step = 0
    for (filename, line, function), (_, calls, self_s, cum_s, _) in table.items():
        label = _short(filename, line, function)
        if "_overhead_profile.py" in label or "bench/_overhead.py" in label:
            continue  # the harness's own frames
        calls_in_step += calls
        lines.append(
            ProfileLine(
                function=label,
                calls_per_step=round(calls / per_step, 3),
                self_us=round(self_s / per_step * 1e6, 2),
                cumulative_us=round(cum_s / per_step * 1e6, 2),
                share=round(cum_s / total, 4) if total > 0 else 0.0,
            )
        )
    return StepProfile(
        loop=name,
        rounds=rounds,
        profiled_us_per_step=round(total / per_step * 1e6, 2),
        calls_per_step=round(calls_in_step / per_step, 1),
        by_cumulative=sorted(lines, key=lambda x: -x.cumulative_us)[:top],
        by_self=sorted(lines, key=lambda x: -x.self_us)[:top],
    )


def render_profiles(profiles: list[StepProfile], console: Console, *, top: int = 15) -> None:
    """One table per profiled loop: its top functions by cumulative time."""
    for profile in profiles:
        table = Table(
            title=f"where the time goes: {profile.loop} "
            f"({profile.profiled_us_per_step:.0f} profiled µs/step, "
            f"{profile.calls_per_step:,.0f} calls/step, {profile.rounds} rounds)"
        )
        for col in ("function", "calls/step", "cum µs/step", "share", "self µs/step"):
            table.add_column(col, justify="left" if col == "function" else "right")
        for line in profile.by_cumulative[:top]:
            table.add_row(
                line.function,
                f"{line.calls_per_step:.1f}",
                f"{line.cumulative_us:.1f}",
                f"{100 * line.share:.0f} %",
                f"{line.self_us:.1f}",
            )
        console.print(table)
