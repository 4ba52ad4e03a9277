"""A sensor before a controller: how well the limiters' input signals predict a 429.

Each simulated second the sensor's state is read: the window's queueing-delay ratio
((p50 − base) / base, the gradient and PID limiters' input), its EWMA (the onset flag's
input) and the capacity-deficit observer's estimate (``closedloop.control.DeficitObserver``).
Two labels: a 429 in the next second (what the brief of a limiter names), and any
refusal (429 or 503) or client timeout in the next second (on the brownout schedule the
servers slow down but the buckets do not shrink, so its failures are timeouts). The third label is the early-warning question: only windows
after 5 s free of refusals and timeouts, where persistence knows nothing. The score is the
AUROC (Mann–Whitney U over all windows of all seeds, ties counted half; Hanley and McNeil
1982): 0.5 is chance, 1 a perfect ranking. Persistence, "a 429 in this second", is the
naive predictor every signal should beat.

Arms: ``fixed, no retries`` with a passive sensor (a frozen PID limiter fed every attempt,
gating nothing: the plant as the signals see it without control), ``PID on delay frozen``
(the limit held at 20) and ``PID on delay`` (the controller acting on the signal it is
scored on, so its own action hides what it predicts). All on the virtual clock.
"""

from __future__ import annotations

import json
from bisect import bisect_right
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from closedloop.control import DelayPIDConfig, DelayPIDLimiter

from ._plant import SCHEDULES, ProviderConfig
from ._sim import STRATEGIES, _Agent, _Sim

__all__ = ["auroc", "run_sensor", "write_sensor"]

ARMS = ("fixed, no retries", "PID on delay frozen", "PID on delay")
SIGNALS = ("delay_ratio", "delay_ewma", "capacity_deficit", "persistence")
# label -> (what counts, seconds that must be free of it before the window: 0 = all windows)
_LABELS = {
    "429_next_1s": ("429", 0.0),
    "refusal_or_timeout_next_1s": ("refusal", 0.0),
    "onset_after_5s_quiet": ("refusal", 5.0),
}


def auroc(scores: Sequence[float], labels: Sequence[bool]) -> float | None:
    """P(score of a positive > score of a negative), ties half; None without both classes."""
    pairs = sorted(zip(scores, labels, strict=True))
    pos = sum(labels)
    neg = len(labels) - pos
    if not pos or not neg:
        return None
    rank_sum, i = 0.0, 0
    while i < len(pairs):
        j = i
        while j < len(pairs) and pairs[j][0] == pairs[i][0]:
            j += 1
        mid = (i + j + 1) / 2  # the average 1-based rank of the tied block
        rank_sum += mid * sum(1 for k in range(i, j) if pairs[k][1])
        i = j
    return (rank_sum - pos * (pos + 1) / 2) / (pos * neg)


class _SensorSim(_Sim):
    """The fleet simulator with the sensor read every second."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.passive = self.limiter is None
        self.sensor: Any = (
            DelayPIDLimiter(DelayPIDConfig(frozen=True)) if self.passive else self.limiter
        )
        self.readings: list[tuple[float, float, float, float]] = []
        self.timeouts: list[float] = []

    def answer(self, now: float, agent: _Agent, ident: int, status: int, ra: float) -> None:
        if agent.live == ident and status == -1:
            self.timeouts.append(now)
        if self.passive and agent.live == ident:
            outcome = {200: "ok", -1: "timeout"}.get(status, "rejected")
            self.sensor.record(now, now - agent.sent, outcome, self.inflight)
        super().answer(now, agent, ident, status, ra)

    def tick(self, now: float) -> None:
        super().tick(now)
        self.sensor.poll(now)
        s = self.sensor
        self.readings.append((now, s.delay_ratio, s._ratio_ewma, s.deficit.estimate))


def _windows(
    sim: _SensorSim, warmup_s: float, label: str, quiet_s: float = 0.0
) -> list[tuple[list[float], bool]]:
    if label == "429":
        times = sorted(t for t, code in sim.provider.rejections if code == 429)
    else:
        times = sorted([t for t, _ in sim.provider.rejections] + sim.timeouts)

    def any_in(lo: float, hi: float) -> bool:
        return bisect_right(times, hi) > bisect_right(times, lo)

    out = []
    for now, ratio, ewma, deficit in sim.readings:
        if now < warmup_s or (quiet_s and any_in(now - quiet_s, now)):
            continue
        persistence = 1.0 if any_in(now - 1.0, now) else 0.0
        out.append(([ratio, ewma, deficit, persistence], any_in(now, now + 1.0)))
    return out


def _score(rows: list[tuple[list[float], bool]]) -> dict[str, Any]:
    labels = [label for _, label in rows]
    return {
        "windows": len(rows),
        "positives": sum(labels),
        "auroc": {
            name: _round(auroc([r[0][k] for r in rows], labels)) for k, name in enumerate(SIGNALS)
        },
    }


def run_sensor(
    seeds: Sequence[int] = tuple(range(10, 20)),
    schedules: Sequence[str] = ("brownout", "shed", "step", "burst"),
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """AUROC of each signal, per schedule, arm and label, over ``seeds`` (warm-up 30 s out)."""
    out: dict[str, Any] = {}
    for name in schedules:
        sched = SCHEDULES[name]
        arms: dict[str, Any] = {}
        for arm in ARMS:
            rows: dict[str, list[tuple[list[float], bool]]] = {k: [] for k in _LABELS}
            lead: list[float | None] = []
            for seed in seeds:
                plant = sched.plant or ProviderConfig()
                sim = _SensorSim(STRATEGIES[arm], sched, sched.clients, seed, plant)
                sim.run()
                for key, (label, quiet) in _LABELS.items():
                    rows[key] += _windows(sim, 30.0, label, quiet)
                lead.append(_first_429_after_onset(sim))
            arms[arm] = {key: _score(found) for key, found in rows.items()}
            arms[arm]["first_429_after_onset_s"] = lead
            if progress:
                progress(f"{name} / {arm}: {arms[arm]}")
        out[name] = arms
    return {"seeds": list(seeds), "warmup_s": 30.0, "signals": list(SIGNALS), "schedules": out}


def _first_429_after_onset(sim: _SensorSim) -> float | None:
    """Seconds from the onset to the first 429 after it (None: no onset, or no 429)."""
    onset = sim.sched.onset_s
    if onset is None:
        return None
    first = min(
        (t for t, code in sim.provider.rejections if code == 429 and t >= onset), default=None
    )
    return None if first is None else round(first - onset, 2)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def write_sensor(report: dict[str, Any], out: Path, command: str) -> Path:
    """``sensor.json`` in ``out``, with the command that rewrites it."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "sensor.json"
    path.write_text(json.dumps({"command": command, **report}, indent=2) + "\n")
    return path
