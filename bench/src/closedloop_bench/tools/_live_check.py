"""The live check of the replay: the real strategies run live on the first tasks of the
interleaved order, set beside the replay's intervals on the same tasks.

The constrained single call (``strict``) and its vote (``svotes@3``: the first sample
greedy, the rest at the bank's temperature) run through the benchmark's own runner and
strategies (``run_tools_bench``), not the replay, with the bank's token limit; the replay
of the same decisions (``single``, ``votes@3``) comes from the bank. The check passes for
a strategy when the live success rate lies inside the replay's 95 % Wilson interval and
the live mean seconds inside the replay's bootstrap interval of mean seconds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from closedloop import ConfigurationError
from closedloop.models import allow_real_model_calls

from ._command import interleave
from ._fixed import StrictVotes
from ._plane import Row, mcnemar_exact, plane_report
from ._replay import Record, Votes
from ._replay_command import _tasks_by_id, load_records
from ._report import ToolsReport
from ._runner import ToolsConfig, run_tools_bench
from ._strategies import Strict

__all__ = ["LIVE_PAIRS", "live_check"]

LIVE_PAIRS = (("strict", Votes(1)), ("svotes@3", Votes(3)))
"""Each live strategy and the replayed strategy it is checked against."""


def _spec(model: str) -> str:
    return model if ":" in model else f"local:{model}"


def _live_rows(report: ToolsReport, tasks: Sequence[str]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for live, _ in LIVE_PAIRS:
        mine = {r.task_id: r for r in report.results if r.strategy == live}
        rows = [mine[t] for t in tasks if t in mine]
        n = len(rows)
        out[live] = {
            "n": n,
            "success": sum(r.success for r in rows),
            "success_rate": sum(r.success for r in rows) / n if n else None,
            "mean_seconds": sum(r.wall_s for r in rows) / n if n else None,
            "mean_calls": sum(r.model_calls for r in rows) / n if n else None,
            "verdicts": {r.task_id: r.success for r in rows},
        }
    return out


def _inside(value: float | None, interval: Sequence[float]) -> bool | None:
    return None if value is None else interval[0] <= value <= interval[1]


def compare(
    live: Mapping[str, Mapping[str, Any]], records: Sequence[Record], header: Mapping[str, Any]
) -> dict[str, Any]:
    """Each live strategy against its replay on the same tasks."""
    rows = [
        Row(replayed.name, records[0].model, "fixed", tuple(replayed.replay([r]) for r in records))
        for _, replayed in LIVE_PAIRS
    ]
    plane = plane_report(rows, f"{records[0].model} · single")
    stats = {s["name"]: s for s in plane["rows"]}
    out: dict[str, Any] = {}
    for (name, replayed), row in zip(LIVE_PAIRS, rows, strict=True):
        s, got = stats[replayed.name], live[name]
        verdicts = got["verdicts"]
        paired = [o for o in row.outcomes if o.task_id in verdicts]
        out[name] = {
            "replayed_as": replayed.name,
            "live": {k: v for k, v in got.items() if k != "verdicts"},
            "replay": {
                key: s[key]
                for key in ("n", "success", "success_rate", "success_ci", "mean_seconds")
            }
            | {"mean_seconds_ci": s["mean_seconds_ci"], "mean_calls": s["mean_calls"]},
            "success_inside": _inside(got["success_rate"], s["success_ci"]),
            "seconds_inside": _inside(got["mean_seconds"], s["mean_seconds_ci"]),
            "per_task_agreement": mcnemar_exact(
                [verdicts[o.task_id] for o in paired], [o.success for o in paired]
            ),
        }
    return out


def live_check(
    model: str,
    bank: Path,
    tasks_path: Path,
    *,
    limit: int = 60,
    threads: int | None = None,
    command: str = "",
    progress: bool = False,
) -> dict[str, Any]:
    """Run the live strategies on the first ``limit`` tasks and compare with the bank
    (``progress``: a progress bar over the runs)."""
    if limit < 1:
        raise ConfigurationError("--limit", limit, "must be at least 1")
    header, records = load_records(bank, tasks_path)
    by_id = _tasks_by_id(tasks_path.resolve())
    tasks = interleave(list(by_id.values()))[:limit]
    have = {r.task_id: r for r in records}
    missing = [t.id for t in tasks if t.id not in have]
    if missing:
        raise ConfigurationError(
            "bank", str(bank), f"lacks {len(missing)} of the first {limit} tasks ({missing[0]})"
        )
    config = ToolsConfig(
        models=[_spec(model)],
        strategies=[
            Strict(max_tokens=int(header["max_tokens"])),
            StrictVotes(
                3,
                temperature=float(header["temperature"]),
                max_tokens=int(header["max_tokens"]),
            ),
        ],
        source=f"{tasks_path.stem} (first {limit})",
        model_options={} if threads is None else {"n_threads": threads},
        progress=progress,
    )
    with allow_real_model_calls():
        report = asyncio.run(run_tools_bench(tasks, config))
    ids = [t.id for t in tasks]
    live = _live_rows(report, ids)
    return {
        "command": command,
        "model": model,
        "bank": str(bank),
        "n": len(tasks),
        "strategies": compare(live, [have[i] for i in ids], header),
    }
