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
from ._sim import CALLS, STRATEGIES, SimResult, simulate

__all__ = ["FleetConfig", "plot_fleet", "run_fleet"]

LIMITERS = ("AIMD", "gradient", "PID on delay")
PLOTTED = (
    "fixed, two retries (SDK)",
    "fixed, tenacity backoff",
    "PID on delay",
    "PID on delay frozen",
)


@dataclass(frozen=True)
class FleetConfig:
    """Seeds (paired: every strategy sees the same ones), schedules and client count."""

    seeds: tuple[int, ...] = tuple(range(10, 20))
    schedules: tuple[str, ...] = tuple(SCHEDULES)
    clients: int | None = None


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
    config: FleetConfig, progress: Callable[[str], None] | None = None
) -> tuple[dict[str, Any], dict[str, SimResult]]:
    """All schedules × strategies × seeds; the report and, per schedule, the first seed's traces."""
    plant = ProviderConfig()
    calm = SCHEDULES["steady"]
    base = [
        simulate(STRATEGIES["fixed, no retries"], calm, clients=10, seed=s) for s in config.seeds
    ]
    base_p99 = sum(measure(r, calm, plant).p99_s for r in base) / len(base)
    report: dict[str, Any] = {"uncongested_p99_s": round(base_p99, 3), "schedules": {}}
    traces: dict[str, SimResult] = {}
    for name in config.schedules:
        sched = SCHEDULES[name]
        eps: dict[str, list[Episode]] = {}
        for strategy in STRATEGIES.values():
            runs = [simulate(strategy, sched, clients=config.clients, seed=s) for s in config.seeds]
            traces[f"{name}/{strategy.name}"] = runs[0]
            eps[strategy.name] = [measure(r, sched, plant) for r in runs]
            if progress:
                progress(f"{name}: {strategy.name}")
        report["schedules"][name] = {
            "clients": config.clients or sched.clients,
            "capacity_runs_per_min": round(capacity_rps(plant, sched.at(0.0)) * 60 / CALLS, 2),
            "rows": {k: _row(v, base_p99) for k, v in eps.items()},
            "on_vs_frozen": {k: _paired(eps[k], eps[f"{k} frozen"]) for k in LIMITERS},
        }
    report["targets"] = targets(report)
    report["plant"] = asdict(plant)
    report["seeds"] = list(config.seeds)
    return report, traces


def _mean(row: dict[str, Any], key: str) -> float:
    value = row[key]["mean"] if row.get(key) else None
    return math.nan if value is None else float(value)


def targets(report: dict[str, Any]) -> dict[str, Any]:
    """Each of the issue's targets, measured on the PID limiter (ours) and the best limiter."""
    sch = report["schedules"]
    out: dict[str, Any] = {}
    if "steady" in sch and "step" in sch:
        pid_s = _mean(sch["steady"]["rows"]["PID on delay"], "goodput_of_capacity")
        pid_d = _mean(sch["step"]["rows"]["PID on delay"], "goodput_dip_of_capacity")
        sdk_s = _mean(sch["steady"]["rows"]["fixed, two retries (SDK)"], "goodput_of_capacity")
        sdk_d = _mean(sch["step"]["rows"]["fixed, two retries (SDK)"], "goodput_dip_of_capacity")
        out["goodput"] = {
            "pid_steady": pid_s,
            "pid_step_dip": pid_d,
            "sdk_steady": sdk_s,
            "sdk_step_dip": sdk_d,
            "met": pid_s >= 0.95 and pid_d >= 0.90 and sdk_s <= 0.70 and sdk_d <= 0.70,
        }
    ret = [n for n in sch if SCHEDULES[n].return_s is not None]
    rec = {n: sch[n]["rows"]["PID on delay"]["recovery_s"] for n in ret}
    worst = max((r["hi"] if r and r["hi"] is not None else math.inf) for r in rec.values())
    stuck = (
        [
            f"{n}: {k}"
            for n in ret
            for k, row in sch[n]["rows"].items()
            if k.startswith("fixed") and row["never_recovered"] == len(report.get("seeds", [])) > 0
        ]
        if ret
        else []
    )
    out["recovery"] = {
        "pid_recovery_s": rec,
        "collapsed_fixed": stuck,
        "met": worst <= 10.0 and bool(stuck),
    }
    rows = [sch[n]["rows"]["PID on delay"] for n in sch]
    aps = max(_mean(r, "attempts_per_success") for r in rows)
    p99 = max(r["p99_over_uncongested"] or math.inf for r in rows)
    out["cost_latency"] = {
        "pid_attempts_per_success_max": aps,
        "pid_p99_over_uncongested_max": p99,
        "met": aps <= 1.1 and p99 <= 2.0,
    }
    flags = [
        (sch[n]["rows"]["PID on delay"]["flagged_ahead"], sch[n]["rows"]["PID on delay"]["onsets"])
        for n in ret
    ]
    got, total = sum(f or 0 for f, _ in flags), sum(t or 0 for _, t in flags)
    alarms = max(
        (_mean(sch[n]["rows"]["PID on delay"], "false_alarms_per_100_calm_min") for n in ret),
        default=math.nan,
    )
    out["early_warning"] = {
        "flagged_ahead": got,
        "onsets": total,
        "false_alarms_max": alarms,
        "met": total > 0 and got >= 0.8 * total and alarms <= 5.0,
    }
    sep = {n: sch[n]["on_vs_frozen"]["PID on delay"]["separated"] for n in sch}
    out["on_vs_frozen"] = {"pid_separated": sep, "met": any(sep.values())}
    out["redis_two_workers"] = {"met": None, "note": "not measured: no shared limiter yet"}
    return out


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
