"""What a fleet run is judged on: goodput against capacity, cost, latency, recovery, warning."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from ._plant import ProviderConfig, Schedule, capacity_rps
from ._sim import CALLS, SimResult

__all__ = ["WARMUP_S", "Episode", "interval", "measure"]

WARMUP_S = 30.0
RECOVERY_WINDOW_S = 5.0
CALM_GRACE_S = 30.0


@dataclass(frozen=True)
class Episode:
    """One (schedule, strategy, seed): the figures the report aggregates."""

    goodput: float  # successful calls per second after warm-up, over capacity's
    goodput_dip: float | None  # the same between onset and return
    runs_per_min: float  # runs finished per minute after warm-up
    attempts_per_success: float
    failures: int
    p50_s: float
    p99_s: float
    recovery_s: float | None
    flagged_ahead: bool | None
    false_alarms_per_100_min: float | None


def _capacity_runs(config: ProviderConfig, sched: Schedule, t0: float, t1: float) -> float:
    """Capacity in runs per minute averaged over [t0, t1) (1-s steps)."""
    steps = [capacity_rps(config, sched.at(t0 + i)) for i in range(int(t1 - t0))]
    return statistics.fmean(steps) * 60.0 / CALLS


def _goodput(done: list[float], t0: float, t1: float) -> float:
    return sum(t0 <= t < t1 for t in done) * 60.0 / (t1 - t0)


def _quantile(values: list[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _recovery(done: list[float], config: ProviderConfig, sched: Schedule) -> float | None:
    """Seconds after the return until a 5-s window's call goodput reaches 90 % of capacity."""
    ret = sched.return_s
    if ret is None:
        return None
    start = ret
    while start + RECOVERY_WINDOW_S <= sched.duration_s:
        end = start + RECOVERY_WINDOW_S
        got = _goodput(done, start, end) / CALLS
        if got >= 0.9 * _capacity_runs(config, sched, start, end):
            return end - ret
        start += 1.0
    return math.inf


def measure(result: SimResult, sched: Schedule, config: ProviderConfig) -> Episode:
    """The episode's figures (see the benchmark page for each definition)."""
    done = [t for t, _ in result.runs_done]
    calls = result.calls_done
    lat = [d for t, d in result.runs_done if t >= WARMUP_S]
    end = sched.duration_s
    # Calls, not runs: a run finishing in a window began before it, which would credit
    # a dip with work done before the dip; calls are bounded by capacity.
    goodput = _goodput(calls, WARMUP_S, end) / _capacity_runs(config, sched, WARMUP_S, end) / CALLS
    dip = None
    flagged: bool | None = None
    alarms: float | None = None
    if sched.onset_s is not None and sched.return_s is not None:
        on, ret = sched.onset_s, sched.return_s
        dip = _goodput(calls, on, ret) / _capacity_runs(config, sched, on, ret) / CALLS
    if result.limited and sched.onset_s is not None and sched.return_s is not None:
        first_reject = next((t for t, _ in result.rejections if t >= on), math.inf)
        flagged = any(on <= t < min(first_reject, ret) for t in result.flags)
        calm = [(WARMUP_S, on), (ret + CALM_GRACE_S, end)]
        minutes = sum(max(0.0, b - a) for a, b in calm) / 60.0
        count = sum(any(a <= t < b for a, b in calm) for t in result.flags)
        alarms = 100.0 * count / minutes if minutes else None
    return Episode(
        goodput=goodput,
        goodput_dip=dip,
        runs_per_min=_goodput(done, WARMUP_S, end),
        attempts_per_success=result.attempts / max(1, result.calls_ok),
        failures=len(result.failures),
        p50_s=_quantile(lat, 0.5),
        p99_s=_quantile(lat, 0.99),
        recovery_s=_recovery(calls, config, sched),
        flagged_ahead=flagged,
        false_alarms_per_100_min=alarms,
    )


# Two-sided 95 % Student t quantiles by degrees of freedom (seeds − 1).
_T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}


def interval(values: list[float]) -> tuple[float, float, float]:
    """Mean and a 95 % t-interval over seeds (paired differences pass their differences)."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return math.inf, math.inf, math.inf
    mean = statistics.fmean(finite)
    if len(finite) < 2:
        return mean, mean, mean
    half = _T95.get(len(finite) - 1, 1.96) * statistics.stdev(finite) / math.sqrt(len(finite))
    return mean, mean - half, mean + half
