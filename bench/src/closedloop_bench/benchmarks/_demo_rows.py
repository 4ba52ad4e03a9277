"""The demo's rows: one per suite (tool-calling tasks, world tasks) and loop setting.

Every row of a suite runs the same model on the same tasks with the same tools; only the
loop differs: ``open`` (the model answers or plans freehand, nothing checks it), ``closed``
(``closedloop.Agent`` with the controller on) and ``frozen`` (the same loop with every
actuator held at u = 0.5 and no protocol changes). On the world tasks the rules-first
reference agents (rules propose, the model is asked past a gate) are a row of their own,
``reference``: they are closedloop as it is meant to be used, not "the closed loop" of
the comparison, since their rules, not the model, choose most actions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from closedloop._exceptions import ConfigurationError

from ._report import EpisodeResult
from ._stats import wilson_interval

if TYPE_CHECKING:  # the tools package imports this one's statistics: import it on use
    from ..tools import ToolsReport, ToolTask

__all__ = [
    "ROW_LABELS",
    "TOOL_STRATEGIES",
    "WORLD_STRATEGIES",
    "DemoRow",
    "pick_tool_tasks",
    "tool_rows",
    "world_rows",
]

ROW_LABELS = {
    "open": "open loop",
    "closed": "closed loop (controller on)",
    "frozen": "closed loop, controller frozen (u = 0.5)",
    "reference": "rules-first reference agents",
}

TOOL_STRATEGIES = {"open": "open_loop", "closed": "closedloop", "frozen": "frozen"}
"""The tool-calling benchmark's strategy behind each row."""

WORLD_STRATEGIES = {
    "open": "open_loop",
    "closed": "closedloop_model_pid",
    "frozen": "closedloop_model_fixed",
    "reference": "closedloop_adrc",
}
"""The faults benchmark's strategy behind each row (the reference row with the
``reference`` planner; the other two closed ones let the model decide every step)."""


class DemoRow(BaseModel):
    """One suite × loop setting: success with its 95 % interval and the mean cost per task."""

    model_config = ConfigDict(frozen=True)
    suite: str
    row: str
    label: str
    strategy: str
    tasks: int
    successes: int
    success: float
    ci_low: float
    ci_high: float
    model_calls: float
    tokens: float
    seconds: float


def pick_tool_tasks(count: int) -> list[ToolTask]:
    """``count`` tasks of the tool-calling dev split: the families in turn, and within a
    family the first task of a domain not picked yet (so the domains spread too)."""
    from ..tools import DATA_DIR, FAMILIES, load_tool_tasks

    pool = load_tool_tasks(DATA_DIR / "dev.jsonl")
    by_family = {f: [t for t in pool if t.family == f] for f in FAMILIES}
    picked: list[ToolTask] = []
    domains: set[str] = set()
    if count > len(pool):
        raise ConfigurationError("tool_tasks", count, f"the dev split holds {len(pool)} tasks")
    while len(picked) < count and any(by_family.values()):
        for family in FAMILIES:
            queue = by_family[family]
            if not queue or len(picked) >= count:
                continue
            task = next((t for t in queue if t.domain not in domains), queue[0])
            queue.remove(task)
            picked.append(task)
            domains.add(task.domain)
    return picked


def _row(
    suite: str, row: str, strategy: str, n: int, ok: int, calls: float, tokens: float, s: float
) -> DemoRow:
    low, high = wilson_interval(ok, n)
    return DemoRow(
        suite=suite,
        row=row,
        label=ROW_LABELS[row],
        strategy=strategy,
        tasks=n,
        successes=ok,
        success=ok / n if n else 0.0,
        ci_low=low,
        ci_high=high,
        model_calls=calls,
        tokens=tokens,
        seconds=s,
    )


def tool_rows(report: ToolsReport) -> list[DemoRow]:
    """The tool-calling rows of a tools report (one model, every family together)."""
    rows = []
    for row, strategy in TOOL_STRATEGIES.items():
        cell = next((c for c in report.cells if c.strategy == strategy and c.family == "all"), None)
        if cell is None:
            continue
        rows.append(
            _row(
                "tools",
                row,
                strategy,
                cell.n,
                cell.successes,
                cell.model_calls,
                cell.tokens,
                cell.wall_s,
            )
        )
    return rows


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def world_rows(episodes: Sequence[EpisodeResult]) -> list[DemoRow]:
    """The world rows of the demo's episodes."""
    rows = []
    for row, strategy in WORLD_STRATEGIES.items():
        mine = [e for e in episodes if e.strategy == strategy]
        if not mine:
            continue
        rows.append(
            _row(
                "world",
                row,
                strategy,
                len(mine),
                sum(e.success for e in mine),
                _mean([e.model_calls for e in mine]),
                _mean([e.prompt_tokens + e.completion_tokens for e in mine]),
                _mean([e.wall_s for e in mine]),
            )
        )
    return rows
