"""The live check of an agent change: two agent rows of one live report, paired per task,
beside the replay of the same change on the same tasks.

The replay judges one decision (the constrained single call, from a sample bank); an
agent runs several steps with its own prompt, so its rows cannot be replayed exactly.
What can be checked is the *effect*: a change to the agent (``treated``, e.g. the gated
agent: confident single call, else a vote, and no call when the first sample is unsure)
against the same agent without it (``reference``), live and paired per task, set beside
the replayed effect of the same change on the one-call decision (``replay_treated``
against ``replay_reference``). The change is confirmed when the replayed difference in
success lies inside the live difference's paired bootstrap interval.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from closedloop import ConfigurationError
from closedloop_bench.benchmarks._stats import wilson_interval

from ._abstention import declining
from ._plane import mcnemar_exact, paired_bootstrap
from ._replay import Outcome, Record, Strategy
from ._report import TaskResult, ToolsReport

__all__ = ["agent_check", "report_lines"]

ABSTAINED = "abstained"


def _rows(report: ToolsReport, strategy: str, tasks: Sequence[str]) -> list[TaskResult]:
    mine = {r.task_id: r for r in report.results if r.strategy == strategy}
    missing = [t for t in tasks if t not in mine]
    if not mine or missing:
        raise ConfigurationError(
            "strategy",
            strategy,
            f"the report has no result for {len(missing) or len(tasks)} of its tasks",
        )
    return [mine[t] for t in tasks]


def _live_summary(rows: Sequence[TaskResult]) -> dict[str, Any]:
    n, k = len(rows), sum(r.success for r in rows)
    abstained = [r for r in rows if r.halt == ABSTAINED]
    families: dict[str, list[int]] = {}
    for r in rows:
        families.setdefault(r.family, [0, 0])
        families[r.family][0] += r.success
        families[r.family][1] += 1
    return {
        "n": n,
        "success": k,
        "success_rate": k / n,
        "success_ci": list(wilson_interval(k, n)),
        "mean_calls": sum(r.model_calls for r in rows) / n,
        "mean_tokens": sum(r.tokens_in + r.tokens_out for r in rows) / n,
        "mean_seconds": sum(r.wall_s for r in rows) / n,
        "abstained": len(abstained),
        "abstained_right": sum(r.success for r in abstained),
        "abstained_by_family": _count_by_family(abstained),
        "success_by_family": {f: {"success": s, "n": m} for f, (s, m) in sorted(families.items())},
    }


def _count_by_family(rows: Sequence[TaskResult]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in rows:
        out[r.family] = out.get(r.family, 0) + 1
    return dict(sorted(out.items()))


def _paired(a: Sequence[bool], b: Sequence[bool]) -> dict[str, Any]:
    return {
        "success": mcnemar_exact(list(a), list(b)),
        "difference": paired_bootstrap([float(x) for x in a], [float(y) for y in b]),
    }


def _replayed(strategy: Strategy, records: Sequence[Record]) -> list[Outcome]:
    return [strategy.replay([r]) for r in records]


def agent_check(
    report: ToolsReport,
    records: Sequence[Record],
    *,
    reference: str,
    treated: str,
    replay_reference: Strategy,
    replay_treated: Strategy,
    abstain_below: float | None = None,
    reference_report: ToolsReport | None = None,
) -> dict[str, Any]:
    """``treated`` against ``reference`` live, and the replayed change on the same tasks
    (``records``: the bank's records of the report's tasks, in its order). With
    ``abstain_below``, also how often the live and the replayed first proposal agree on
    abstaining (the bank's first sample below the floor against a live ``abstained``).
    ``reference_report``: the reference row comes from that report (an earlier run of the
    same tasks and model) instead of ``report``; its seconds are then another run's."""
    tasks = [r.task_id for r in records]
    if not tasks:
        raise ConfigurationError("records", 0, "needs the bank's records of the report's tasks")
    live_ref = _rows(reference_report or report, reference, tasks)
    live_new = _rows(report, treated, tasks)
    rep_ref, rep_new = _replayed(replay_reference, records), _replayed(replay_treated, records)
    live = _paired([r.success for r in live_new], [r.success for r in live_ref])
    replay = _paired([o.success for o in rep_new], [o.success for o in rep_ref])
    interval = live["difference"]
    out: dict[str, Any] = {
        "n": len(tasks),
        "live": {
            _named(reference, treated): _live_summary(live_ref),
            treated: _live_summary(live_new),
        },
        "live_paired": live
        | {
            what: paired_bootstrap(
                [_cost(r, what) for r in live_new], [_cost(r, what) for r in live_ref]
            )
            for what in ("calls", "tokens", "seconds")
        },
        "replay": {
            "reference": replay_reference.name,
            "treated": replay_treated.name,
            "success": {
                replay_reference.name: sum(o.success for o in rep_ref),
                replay_treated.name: sum(o.success for o in rep_new),
            },
            "paired": replay,
        },
        "replayed_difference_inside_live_interval": (
            interval["low"] <= replay["difference"]["mean"] <= interval["high"]
        ),
    }
    if abstain_below is not None:
        out["abstain_agreement"] = _abstain_agreement(live_new, records, abstain_below)
        out["declines_against_random"] = _declines_against_random(live_new, live_ref, records)
    return out


def _named(reference: str, treated: str) -> str:
    # Rows of two runs may share a name (the same strategy before and after a change).
    return reference if reference != treated else f"{reference} (reference run)"


def _cost(row: TaskResult, what: str) -> float:
    if what == "calls":
        return float(row.model_calls)
    if what == "tokens":
        return float(row.tokens_in + row.tokens_out)
    return float(row.wall_s)


def _abstain_agreement(
    rows: Sequence[TaskResult], records: Sequence[Record], floor: float
) -> dict[str, int]:
    both = live_only = bank_only = neither = 0
    for row, record in zip(rows, records, strict=True):
        first = record.samples[0].p_low
        bank = first is not None and first < floor
        here = row.halt == ABSTAINED
        both += here and bank
        live_only += here and not bank
        bank_only += bank and not here
        neither += not here and not bank
    return {"both": both, "live_only": live_only, "bank_only": bank_only, "neither": neither}


def _declines_against_random(
    treated: Sequence[TaskResult], reference: Sequence[TaskResult], records: Sequence[Record]
) -> dict[str, Any]:
    """What the treated row's abstentions did to the reference row's tasks, against as many
    declined at random: each declined task gains where no tool fits (the bank's checker
    on an answer with no call) and loses where the reference solved it."""
    solved = [r.success for r in reference]
    judged = declining("", records, solved, [row.halt == ABSTAINED for row in treated])
    base = sum(solved)
    return {
        "declined": judged["declined"],
        "no_tool_fits_tasks": sum(r.abstain_ok for r in records),
        "net_gain": judged["success"] - base,
        "random_same_rate_net_gain": round(judged["random_same_rate"] - base, 2),
        "above_random": judged["above_random"],
    }


def report_lines(check: Mapping[str, Any]) -> list[str]:
    """The check as a few printable lines."""
    lines = []
    for name, row in check["live"].items():
        lines.append(
            f"{name}: {row['success']}/{row['n']} live, {row['mean_calls']:.2f} calls, "
            f"{row['mean_seconds']:.1f} s a task, abstained {row['abstained']} "
            f"({row['abstained_right']} right)"
        )
    paired, replay = check["live_paired"], check["replay"]
    diff = paired["difference"]
    lines.append(
        f"live difference {diff['mean']:+.3f} [{diff['low']:+.3f}, {diff['high']:+.3f}] "
        f"(only treated / only reference {paired['success']['only_a']} / "
        f"{paired['success']['only_b']}, McNemar p {paired['success']['p']:.3g})"
    )
    lines.append(
        f"replay {replay['treated']} vs {replay['reference']}: "
        f"{replay['paired']['difference']['mean']:+.3f}; inside the live interval: "
        f"{check['replayed_difference_inside_live_interval']}"
    )
    declines = check.get("declines_against_random")
    if declines is not None:
        lines.append(
            f"declined {declines['declined']}: net {declines['net_gain']:+d} tasks against the "
            f"reference, {declines['random_same_rate_net_gain']:+.2f} if declined at random"
        )
    return lines
