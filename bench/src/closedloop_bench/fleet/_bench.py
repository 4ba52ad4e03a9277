"""``closedloop bench fleet``: every strategy under every schedule, paired seeds, one report."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ._metrics import Episode, interval, measure
from ._plant import SCHEDULES, ProviderConfig, Schedule, capacity_rps
from ._resume import Checkpoint
from ._sim import CALLS, INITIAL_LIMIT, STRATEGIES, FleetStrategy, SimResult, simulate

__all__ = ["FleetConfig", "plot_fleet", "run_fleet"]

LIMITERS = ("AIMD", "gradient", "PID on delay")
FF = " + feed-forward"
CONTROLLED = tuple(name for k in LIMITERS for name in (k, k + FF))
PLOTTED = (
    "fixed, two retries (SDK)",
    "fixed, tenacity backoff",
    "PID on delay",
    "PID on delay + feed-forward",
    "PID on delay frozen",
)


@dataclass(frozen=True)
class FleetConfig:
    """Seeds (paired: every strategy sees the same ones), schedules, client count and the
    limiters' initial limit (where a frozen limiter stays)."""

    seeds: tuple[int, ...] = tuple(range(10, 20))
    schedules: tuple[str, ...] = tuple(SCHEDULES)
    clients: int | None = None
    initial_limit: float = INITIAL_LIMIT


def _stat(values: list[float]) -> dict[str, float | None]:
    mean, lo, hi = interval(values)
    clean = [None if not math.isfinite(v) else round(v, 4) for v in (mean, lo, hi)]
    return {"mean": clean[0], "lo": clean[1], "hi": clean[2]}


def _row(eps: list[Episode], base_p99: float) -> dict[str, Any]:
    rec = [e.recovery_s for e in eps if e.recovery_s is not None]
    flagged = [e.flagged_ahead for e in eps if e.flagged_ahead is not None]
    alarms = [e.false_alarms_per_100_min for e in eps if e.false_alarms_per_100_min is not None]
    return {
        "goodput_of_capacity": _stat([e.goodput for e in eps]),
        "goodput_dip_of_capacity": _stat([e.goodput_dip for e in eps if e.goodput_dip is not None])
        if eps[0].goodput_dip is not None
        else None,
        "attempts_per_success": _stat([e.attempts_per_success for e in eps]),
        "terminal_failures": _stat([float(e.failures) for e in eps]),
        "p50_run_s": _stat([e.p50_s for e in eps]),
        "p99_run_s": _stat([e.p99_s for e in eps]),
        "runs_per_min": _stat([e.runs_per_min for e in eps]),
        "p99_over_uncongested": _ratio([e.p99_s for e in eps], base_p99),
        "recovery_s": _stat(rec) if rec else None,
        "never_recovered": sum(math.isinf(r) for r in rec),
        "flagged_ahead": sum(flagged) if flagged else None,
        "onsets": len(flagged) if flagged else None,
        "false_alarms_per_100_calm_min": _stat(alarms) if alarms else None,
    }


def _ratio(values: list[float], base: float) -> float | None:
    finite = [v for v in values if math.isfinite(v)]
    return round(sum(finite) / len(finite) / base, 3) if finite else None


def _paired(on: list[Episode], off: list[Episode]) -> dict[str, Any]:
    good = _stat([a.goodput - b.goodput for a, b in zip(on, off, strict=True)])
    p99 = _stat([a.p99_s - b.p99_s for a, b in zip(on, off, strict=True)])

    def outside(s: dict[str, float | None]) -> bool:
        lo, hi = s["lo"], s["hi"]
        return lo is not None and hi is not None and (lo > 0 or hi < 0)

    return {"goodput_diff": good, "p99_diff_s": p99, "separated": outside(good) or outside(p99)}


def run_fleet(
    config: FleetConfig,
    progress: Callable[[str], None] | None = None,
    checkpoint: Checkpoint | None = None,
) -> tuple[dict[str, Any], dict[str, SimResult]]:
    """All schedules × strategies × seeds; the report and, per schedule, the first seed's
    traces of the plotted strategies. Cells in ``checkpoint`` are not run again."""
    plant = ProviderConfig()
    calm = SCHEDULES["steady"]
    base = [
        simulate(STRATEGIES["fixed, no retries"], calm, clients=10, seed=s) for s in config.seeds
    ]
    base_p99 = sum(measure(r, calm, plant).p99_s for r in base) / len(base)
    report: dict[str, Any] = {"uncongested_p99_s": round(base_p99, 3), "schedules": {}}
    traces: dict[str, SimResult] = {}
    cells = len(config.schedules) * len(STRATEGIES)
    for name in config.schedules:
        sched = SCHEDULES[name]
        here = sched.plant or plant
        eps: dict[str, list[Episode]] = {}
        for strategy in STRATEGIES.values():
            cell = f"{name}/{strategy.name}"

            def run(
                seed: int, strategy: FleetStrategy = strategy, sched: Schedule = sched
            ) -> SimResult:
                return simulate(
                    strategy,
                    sched,
                    clients=config.clients,
                    seed=seed,
                    initial_limit=config.initial_limit,
                )

            kept = checkpoint.cells.get(cell) if checkpoint else None
            if kept is None:
                runs = [run(s) for s in config.seeds]
                eps[strategy.name] = [measure(r, sched, here) for r in runs]
                if checkpoint:
                    checkpoint.add(cell, eps[strategy.name])
                if strategy.name in PLOTTED:
                    traces[cell] = runs[0]
            else:
                eps[strategy.name] = kept
                if strategy.name in PLOTTED:
                    traces[cell] = run(config.seeds[0])
            if progress:
                done = len(eps) + len(report["schedules"]) * len(STRATEGIES)
                again = " (kept from the last run)" if kept is not None else ""
                progress(f"{done}/{cells} {cell}{again}")
        report["schedules"][name] = {
            "clients": config.clients or sched.clients,
            "capacity_runs_per_min": round(capacity_rps(here, sched.at(0.0)) * 60 / CALLS, 2),
            "plant": None if sched.plant is None else asdict(sched.plant),
            "rows": {k: _row(v, base_p99) for k, v in eps.items()},
            "on_vs_frozen": {
                k: _paired(eps[k], eps[f"{k.removesuffix(FF)} frozen"]) for k in CONTROLLED
            },
            "feedforward_on_vs_off": {k: _paired(eps[f"{k}{FF}"], eps[k]) for k in LIMITERS},
        }
    report["plant"] = asdict(plant)
    report["seeds"] = list(config.seeds)
    report["initial_limit"] = config.initial_limit
    report["targets"] = targets(report)  # after the seeds: "never recovered" counts them
    return report, traces


def _mean(row: dict[str, Any], key: str) -> float:
    value = row[key]["mean"] if row.get(key) else None
    return math.nan if value is None else float(value)


OURS = ("PID on delay", "PID on delay" + FF)
BROWNOUTS = ("brownout", "shed")  # capacity that fades rather than drops at once


def targets(report: dict[str, Any]) -> dict[str, Any]:
    """Each of the issue's targets, measured on our limiter without and with the feed-forward."""
    return {row: _targets(report, row) for row in OURS}


def _targets(report: dict[str, Any], ours: str) -> dict[str, Any]:
    sch = report["schedules"]
    out: dict[str, Any] = {}
    if "steady" in sch and "step" in sch:
        pid_s = _mean(sch["steady"]["rows"][ours], "goodput_of_capacity")
        pid_d = _mean(sch["step"]["rows"][ours], "goodput_dip_of_capacity")
        sdk_s = _mean(sch["steady"]["rows"]["fixed, two retries (SDK)"], "goodput_of_capacity")
        sdk_d = _mean(sch["step"]["rows"]["fixed, two retries (SDK)"], "goodput_dip_of_capacity")
        out["goodput"] = {
            "steady": pid_s,
            "step_dip": pid_d,
            "sdk_steady": sdk_s,
            "sdk_step_dip": sdk_d,
            "met": pid_s >= 0.95 and pid_d >= 0.90 and sdk_s <= 0.70 and sdk_d <= 0.70,
        }
    ret = [n for n in sch if SCHEDULES[n].return_s is not None]
    rec = {n: sch[n]["rows"][ours]["recovery_s"] for n in ret}
    worst = max((r["hi"] if r and r["hi"] is not None else math.inf) for r in rec.values())
    seeds = len(report.get("seeds", []))
    stuck = [
        f"{n}: {k}"
        for n in ret
        for k, row in sch[n]["rows"].items()
        if k.startswith("fixed") and seeds > 0 and row["never_recovered"] == seeds
    ]
    out["recovery"] = {
        "recovery_s": rec,
        "collapsed_fixed": stuck,
        "met": bool(ret) and worst <= 10.0 and bool(stuck),
    }
    rows = {n: sch[n]["rows"][ours] for n in sch}
    aps = {n: _mean(r, "attempts_per_success") for n, r in rows.items()}
    p99 = {n: r["p99_over_uncongested"] for n, r in rows.items()}
    out["cost_latency"] = {
        "attempts_per_success": aps,
        "p99_over_uncongested": p99,
        "met": max(aps.values()) <= 1.1 and max(v or math.inf for v in p99.values()) <= 2.0,
    }
    out["early_warning"] = _warning(sch, ours, ret)
    out["brownouts_flagged"] = _warning(sch, ours, [n for n in ret if n in BROWNOUTS])
    sep = {n: sch[n]["on_vs_frozen"][ours]["separated"] for n in sch}
    out["on_vs_frozen"] = {"separated": sep, "met": any(sep.values())}
    out["redis_two_workers"] = {"met": None, "note": "closedloop bench fleet-shared: shared.json"}
    return out


def _warning(sch: dict[str, Any], ours: str, names: list[str]) -> dict[str, Any]:
    flagged = [sch[n]["rows"][ours]["flagged_ahead"] or 0 for n in names]
    onsets = [sch[n]["rows"][ours]["onsets"] or 0 for n in names]
    alarms = max(
        (_mean(sch[n]["rows"][ours], "false_alarms_per_100_calm_min") for n in names),
        default=math.nan,
    )
    got, total = sum(flagged), sum(onsets)
    return {
        "schedules": names,
        "flagged_ahead": got,
        "onsets": total,
        "false_alarms_max": alarms,
        "met": total > 0 and got >= 0.8 * total and alarms <= 5.0,
    }


def _clean(value: Any) -> Any:
    """JSON has no NaN or infinity: a figure that does not exist is written as null."""
    if isinstance(value, float):
        return round(value, 4) if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def write_report(report: dict[str, Any], out: Path, command: str) -> Path:
    """``report.json`` under ``out``, with the command that rewrites it."""
    out.mkdir(parents=True, exist_ok=True)
    report = _clean({"command": command, **report})
    path = out / "report.json"
    path.write_text(json.dumps(report, indent=2, allow_nan=False, default=str) + "\n")
    return path


def plot_fleet(traces: dict[str, SimResult], schedules: tuple[str, ...], out: Path) -> list[Path]:
    """Per schedule: goodput (5-s bins), capacity and the limit over time, the first seed's runs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    for name in schedules:
        sched: Schedule = SCHEDULES[name]
        fig, (top, low) = plt.subplots(2, 1, figsize=(8, 5.5), sharex=True)
        edges = list(range(0, int(sched.duration_s) + 1, 5))
        for label in PLOTTED:
            trace = traces[f"{name}/{label}"]
            done = [t for t, _ in trace.runs_done]
            rate = [sum(a <= t < a + 5 for t in done) * 12.0 for a in edges[:-1]]
            top.step(edges[:-1], rate, where="post", label=label)
            if label.startswith("PID"):
                low.plot(
                    [t for t, _, _ in trace.timeline],
                    [lim for _, lim, _ in trace.timeline],
                    label=f"limit: {label}",
                )
        first = traces[f"{name}/{PLOTTED[0]}"]
        top.plot(
            [t for t, _, _ in first.timeline],
            [c * 60 / CALLS for _, _, c in first.timeline],
            "k--",
            label="capacity",
        )
        top.set_ylabel("runs finished / min")
        top.set_title(f"{name}: goodput against the provider's capacity")
        top.legend(fontsize=7)
        low.set_ylabel("concurrency limit")
        low.set_xlabel("seconds (simulated)")
        low.legend(fontsize=7)
        fig.tight_layout()
        path = out / f"{name}.png"
        fig.savefig(path, dpi=90)
        plt.close(fig)
        paths.append(path)
    return paths
