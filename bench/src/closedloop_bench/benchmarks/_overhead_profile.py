"""Where a loop's time per step goes: a deterministic profile of a few extra rounds.

``cProfile`` sees the thread it runs in, the event loop's; a store's own worker thread
(SQLite's) shows up only as the waits for it, so its CPU is measured on the side, as the
process's CPU time less the event-loop thread's. Profiled rounds are slower than timed ones
(every call pays the profiler), so each function's share of the profiled step is what to
read, and the µs are the profiled ones. The clock is the thread's CPU time.
"""

from __future__ import annotations

import cProfile
import linecache
import pstats
import re
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from rich.console import Console
from rich.table import Table

__all__ = ["ProfileLine", "StageLine", "StepProfile", "profile_loop", "render_profiles"]


class ProfileLine(BaseModel):
    """One function of a profiled step."""

    model_config = ConfigDict(frozen=True)
    function: str = Field(description="module path:line(name), shortened")
    calls_per_step: float
    self_us: float = Field(description="profiled µs per step inside the function itself")
    cumulative_us: float = Field(description="profiled µs per step inside it and its callees")
    share: float = Field(description="cumulative time over the whole profiled step")


class StageLine(BaseModel):
    """One stage of a step: a function the step function calls directly."""

    model_config = ConfigDict(frozen=True)
    stage: str = Field(description="the function's name")
    function: str = Field(description="module path:line(name), shortened")
    cumulative_us: float = Field(
        description="profiled µs per step inside it and its callees, called from the step"
    )
    share: float = Field(description="its cumulative time over the step function's")


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
    stages: list[StageLine] = Field(
        default_factory=list,
        description="the step function's direct callees, in the order its source first "
        "calls them, then the step's own time (empty where no step function was named or "
        "found)",
    )


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
    step: tuple[str, str] | None = None,
) -> StepProfile:
    """Profile ``rounds`` runs of ``run`` and keep the ``top`` functions (harness left out);
    ``step`` (a file path's ending and a function's name) names the loop's step function,
    whose direct callees are reported as its stages."""
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
        stages=[] if step is None else _stages(table, step, per_step),
    )


def _stages(
    table: dict[tuple[str, int, str], tuple[Any, ...]], step: tuple[str, str], per_step: int
) -> list[StageLine]:
    """The time each direct callee of the step function spent when called from it, in the
    order the step's source first calls them, then the step's own time."""
    ending, name = step
    parents = [key for key in table if key[0].endswith(ending) and key[2] == name]
    if len(parents) != 1:
        return []
    parent = parents[0]
    step_s = table[parent][3]
    source = _source_of(parent)
    stages: list[tuple[int, str, str, float]] = []
    for (filename, line, function), entry in table.items():
        via = entry[4].get(parent)  # this callee's calls from the step: (cc, nc, tt, ct)
        if via is not None:
            called = re.search(rf"\b{re.escape(function)}\(", source)
            at = called.start() if called is not None else len(source)
            stages.append((at, function, _short(filename, line, function), via[3]))
    stages.sort()
    own = max(0.0, step_s - sum(seconds for *_, seconds in stages))
    rows = [(stage, label, seconds) for _, stage, label, seconds in stages]
    rows.append(("(the step itself)", _short(*parent), own))
    return [
        StageLine(
            stage=stage,
            function=label,
            cumulative_us=round(seconds / per_step * 1e6, 2),
            share=round(seconds / step_s, 4) if step_s > 0 else 0.0,
        )
        for stage, label, seconds in rows
    ]


def _source_of(key: tuple[str, int, str]) -> str:
    """The step function's source, from its first line to the file's end (enough to find
    where each callee is first called)."""
    filename, line, _ = key
    return "".join(linecache.getlines(filename)[max(0, line - 1) :])


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
        if profile.stages:
            stages = Table(title=f"the step by stage: {profile.loop}")
            for col in ("stage", "cum µs/step", "share of the step"):
                stages.add_column(col, justify="left" if col == "stage" else "right")
            for stage in profile.stages:
                stages.add_row(
                    stage.stage, f"{stage.cumulative_us:.1f}", f"{100 * stage.share:.0f} %"
                )
            console.print(stages)
