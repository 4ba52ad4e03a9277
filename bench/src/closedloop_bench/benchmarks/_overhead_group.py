"""Group commit under concurrency: synced commits per step as sessions run side by side.

Several agents, each on its own session, share one ``SQLiteStore`` (``synchronous=FULL``)
and run at once on one event loop. The store's worker thread commits every write that is
waiting when it is free in one transaction (one fsync), so the more sessions wait at once,
the fewer commits a step costs. Counted with the store's own counter, which the tests check
against the COMMIT statements SQLite runs on the connection.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from closedloop import Runtime
from closedloop.agent import Agent, RunLimits, Task
from closedloop.execution import AtomicAction, EffectClass
from closedloop.feedback import SQLiteStore

from ._overhead_loops import ZeroLatencyModel, work

__all__ = ["GroupCommitRow", "measure_group_commit"]


class GroupCommitRow(BaseModel):
    """``sessions`` runs at once on one SQLite file: what a step costs in commits and CPU."""

    model_config = ConfigDict(frozen=True)
    sessions: int
    effect: str = Field(description="the tool's effect class: recomputable is read-only")
    steps: int = Field(description="agent steps of all the runs of one round")
    commits: float = Field(description="median synced commits of one round")
    commits_per_step: float = Field(
        description="commits over steps; a run's first commit creates its session"
    )
    cpu_us_per_step: float = Field(description="median process CPU µs per step")


async def _round(
    store: SQLiteStore, sessions: int, steps: int, effect: EffectClass
) -> tuple[int, int, float]:
    """One round: ``sessions`` runs at once; (steps, commits, CPU seconds)."""
    action = AtomicAction(name="work", fn=work, effect=effect)
    agents = [
        Agent(
            ZeroLatencyModel(steps),
            [action],
            limits=RunLimits(max_steps=steps + 2),
            runtime=Runtime(store=store, trace=False),
        )
        for _ in range(sessions)
    ]
    before, cpu = store.stats.commits, time.process_time()
    results = await asyncio.gather(*(a.run(Task(prompt="double the numbers")) for a in agents))
    cpu = time.process_time() - cpu
    if not all(r.success for r in results):
        raise AssertionError("a group-commit run failed")
    return sum(len(r.steps) for r in results), store.stats.commits - before, cpu


async def measure_group_commit(
    workdir: Path,
    *,
    steps: int,
    rounds: int,
    sessions: Sequence[int] = (1, 4, 16),
    effects: Sequence[EffectClass] = (EffectClass.RECOMPUTABLE, EffectClass.ONCE),
) -> list[GroupCommitRow]:
    """For each effect class and each number of concurrent sessions, ``rounds`` rounds."""
    rows = []
    for effect in effects:
        for n in sessions:
            store = SQLiteStore(workdir / f"group-{effect.value}-{n}.db")
            try:
                measured = [await _round(store, n, steps, effect) for _ in range(rounds)]
            finally:
                await store.close()
            total = measured[0][0]
            commits = statistics.median(m[1] for m in measured)
            rows.append(
                GroupCommitRow(
                    sessions=n,
                    effect=effect.value,
                    steps=total,
                    commits=commits,
                    commits_per_step=commits / total,
                    cpu_us_per_step=statistics.median(m[2] for m in measured) / total * 1e6,
                )
            )
    return rows
