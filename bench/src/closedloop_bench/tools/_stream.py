"""A risk controller on the acceptance threshold, replayed along a stream of tasks.

Each task's first (greedy) sample is accepted when its confidence (``exp(logprob_low)``)
is at least the threshold; an accepted call is judged by the checker and that verdict is
fed back (``update(err)``, err: the accepted call was wrong); a rejected one is handed
over (an abstention: not accepted, no verdict, no success). The threshold either stays
fixed or is set online by conformal PID control (Angelopoulos, Candès and Tibshirani
2023; its integral-only form is adaptive conformal inference, Gibbs and Candès 2021),
which holds the error rate of accepted calls at a target alpha under shift.

The shifted stream puts the shifts a deployment meets into the eval split: first only
the families the strong model finds easiest, then every family, then the weak model's
samples in place of the strong one's (the rung degrades). Fixed thresholds are chosen on
the first quarter of the stream, before any shift, as an operator would tune on what
they have seen.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from closedloop import ConfigurationError

from ._replay import Record

__all__ = [
    "FixedThreshold",
    "StreamItem",
    "StreamStep",
    "choose_gains",
    "choose_threshold",
    "plot_stream",
    "rolling_error",
    "run_stream",
    "shifted_stream",
    "stream_report",
    "summarise_steps",
]


class Threshold(Protocol):
    """An acceptance threshold fed the verdict of each accepted call."""

    @property
    def threshold(self) -> float: ...

    def update(self, err: bool) -> float: ...


@runtime_checkable
class Observing(Protocol):
    """A threshold that also reads every proposal's confidence (accepted or not)."""

    def observe(self, confidence: float) -> None: ...


@dataclass(frozen=True, slots=True)
class FixedThreshold:
    """A threshold that never moves (the open-loop comparison)."""

    tau: float

    @property
    def threshold(self) -> float:
        return self.tau

    def update(self, err: bool) -> float:
        del err  # A fixed threshold ignores feedback: that is the point of the comparison.
        return self.tau


@dataclass(frozen=True, slots=True)
class StreamItem:
    """One task of a stream: whose samples it uses and which phase of the stream it is in."""

    record: Record
    phase: str


@dataclass(frozen=True, slots=True)
class StreamStep:
    """One task under a threshold: what it read, whether it accepted, what came of it."""

    index: int
    task_id: str
    family: str
    model: str
    phase: str
    confidence: float
    threshold: float
    accepted: bool
    wrong: bool
    seconds: float
    tokens: int


def run_stream(items: Sequence[StreamItem], controller: Threshold) -> list[StreamStep]:
    """Replay ``items`` in order under ``controller``: the threshold before each task
    decides, and each accepted call's verdict updates it."""
    steps: list[StreamStep] = []
    for i, item in enumerate(items):
        first = item.record.samples[0]
        confidence = 0.0 if first.p_low is None else first.p_low
        tau = controller.threshold
        accepted = confidence >= tau
        wrong = accepted and not first.ok
        if accepted:
            controller.update(wrong)
        if isinstance(controller, Observing):
            controller.observe(min(1.0, max(0.0, confidence)))
        steps.append(
            StreamStep(
                i,
                item.record.task_id,
                item.record.family,
                item.record.model,
                item.phase,
                confidence,
                tau,
                accepted,
                wrong,
                first.seconds,
                first.tokens,
            )
        )
    return steps


def _error(steps: Sequence[StreamStep]) -> float | None:
    accepted = [s for s in steps if s.accepted]
    return None if not accepted else sum(s.wrong for s in accepted) / len(accepted)


def summarise_steps(steps: Sequence[StreamStep], alpha: float) -> dict[str, Any]:
    """Coverage (share accepted), accepted-call error and its gap to ``alpha``, overall and
    per phase."""

    def part(chunk: Sequence[StreamStep]) -> dict[str, Any]:
        err = _error(chunk)
        accepted = sum(s.accepted for s in chunk)
        return {
            "n": len(chunk),
            "accepted": accepted,
            "coverage": accepted / len(chunk) if chunk else None,
            "accepted_error": err,
            "gap_to_alpha": None if err is None else err - alpha,
            "success": sum(s.accepted and not s.wrong for s in chunk),
            "mean_seconds": sum(s.seconds for s in chunk) / len(chunk) if chunk else None,
        }

    phases = list(dict.fromkeys(s.phase for s in steps))
    return {
        "overall": part(steps),
        "phases": {p: part([s for s in steps if s.phase == p]) for p in phases},
    }


def rolling_error(steps: Sequence[StreamStep], window: int) -> list[float | None]:
    """At each task, the error rate of the last ``window`` accepted calls (None until one
    has been accepted)."""
    if window < 1:
        raise ConfigurationError("window", window, "must be at least 1")
    out: list[float | None] = []
    recent: list[bool] = []
    for s in steps:
        if s.accepted:
            recent.append(s.wrong)
            if len(recent) > window:
                recent.pop(0)
        out.append(sum(recent) / len(recent) if recent else None)
    return out


def choose_threshold(items: Sequence[StreamItem], alpha: float, grid: Sequence[float]) -> float:
    """The fixed threshold an operator tunes on ``items``: the lowest on ``grid`` (the most
    accepted) whose accepted-call error there is at most ``alpha``; the one with the
    lowest error when none is."""
    if not grid:
        raise ConfigurationError("grid", grid, "must hold at least one threshold")
    scored = []
    for tau in sorted(grid):
        err = _error(run_stream(items, FixedThreshold(tau)))
        if err is not None and err <= alpha:
            return tau
        scored.append((1.0 if err is None else err, tau))
    return min(scored)[1]


def _easy_families(records: Sequence[Record], count: int) -> list[str]:
    by_family: dict[str, list[bool]] = {}
    for r in records:
        by_family.setdefault(r.family, []).append(r.samples[0].ok)
    ranked = sorted(by_family, key=lambda f: (-sum(by_family[f]) / len(by_family[f]), f))
    return ranked[:count]


def shifted_stream(
    strong: Sequence[Record],
    weak: Sequence[Record] | None = None,
    *,
    easy_families: int = 2,
    mix_shift_at: float = 1 / 3,
    model_switch_at: float = 2 / 3,
) -> tuple[list[StreamItem], dict[str, Any]]:
    """The tasks of ``strong`` (in their order) as a stream with shifts, and its
    description: until ``mix_shift_at`` only the ``easy_families`` families where the
    strong model's first sample is right most often; then every other task; from
    ``model_switch_at`` on, each task's record from ``weak`` (when given) instead."""
    if not strong:
        raise ConfigurationError("strong", strong, "the stream needs at least one task")
    if not 0.0 <= mix_shift_at <= model_switch_at <= 1.0:
        raise ConfigurationError(
            "mix_shift_at", (mix_shift_at, model_switch_at), "need 0 <= mix <= switch <= 1"
        )
    easy = _easy_families(strong, easy_families)
    n = len(strong)
    head_n = int(n * mix_shift_at)
    head = [r for r in strong if r.family in easy][:head_n]
    taken = {r.task_id for r in head}
    order = head + [r for r in strong if r.task_id not in taken]
    weak_by_id: Mapping[str, Record] = {r.task_id: r for r in weak or ()}
    switch = int(n * model_switch_at)
    items: list[StreamItem] = []
    for i, record in enumerate(order):
        if i < len(head):
            items.append(StreamItem(record, f"easy families ({record.model})"))
        elif i < switch or record.task_id not in weak_by_id:
            items.append(StreamItem(record, f"all families ({record.model})"))
        else:
            swapped = weak_by_id[record.task_id]
            items.append(StreamItem(swapped, f"all families ({swapped.model})"))
    description = {
        "n": n,
        "easy_families": easy,
        "mix_shift_at": len(head),
        "model_switch_at": switch if weak_by_id else None,
        "weak_model": next(iter(weak_by_id.values())).model if weak_by_id else None,
        "phases": list(dict.fromkeys(item.phase for item in items)),
    }
    return items, description


def steps_as_dicts(steps: Sequence[StreamStep]) -> list[dict[str, Any]]:
    """The steps as JSON-ready dicts (rounded)."""
    return [
        {**asdict(s), "confidence": round(s.confidence, 6), "threshold": round(s.threshold, 6)}
        for s in steps
    ]


Form = Literal["raw", "level"]
"""Where a controller moves: the threshold itself, or the share of proposals rejected."""
THRESHOLD_GRID = (*(round(0.05 * i, 2) for i in range(20)), 0.97, 0.99, 0.995, 0.999)
"""The fixed thresholds an operator may pick from."""
CONTROLLERS: tuple[tuple[str, Form, float, float], ...] = (
    ("ACI γ=0.02", "raw", 0.0, 0.02),
    ("ACI γ=0.05", "raw", 0.0, 0.05),
    ("PID kp=0.1 ki=0.02", "raw", 0.1, 0.02),
    ("ACI on the level γ=0.05", "level", 0.0, 0.05),
    ("PID on the level kp=0.1 ki=0.05", "level", 0.1, 0.05),
)
"""The risk controllers replayed with preset gains: (label, form, kp, ki). Integral-only
is adaptive conformal inference (Gibbs and Candès 2021); the ``raw`` form moves the
threshold on the confidence's own scale, the ``level`` form moves the share rejected and
reads the threshold as that quantile of recent confidences
(:class:`~closedloop.control.QuantileThreshold`)."""
GAIN_GRID = tuple(
    (kp, ki) for kp in (0.0, 0.05, 0.1, 0.2, 0.3) for ki in (0.01, 0.02, 0.05, 0.1, 0.2)
)
"""The (kp, ki) pairs a controller's gains are chosen from on the development stream."""
TUNE_SHARE = 0.25
"""Without a development stream, the share of the stream the fixed threshold is tuned on
(before any shift)."""
LIMITS = (0.0, 0.999)
"""The controllers' threshold limits: below the largest confidence the sensor reports, so
a threshold at the top still accepts the surest calls and keeps getting feedback."""


LEVEL_START = 0.5
"""The level form's first share rejected (its threshold is a quantile, not a score)."""


def _controller(alpha: float, form: Form, kp: float, ki: float, start: float) -> Threshold:
    from closedloop.control import ConformalPID, QuantileThreshold

    if form == "level":
        return QuantileThreshold(alpha, kp, ki, start=LEVEL_START)
    return ConformalPID(alpha, kp, ki, 0.0, start=start, limits=LIMITS)


def choose_gains(
    items: Sequence[StreamItem],
    alpha: float,
    start: float,
    grid: Sequence[tuple[float, float]] = GAIN_GRID,
    form: Form = "raw",
) -> tuple[float, float]:
    """The (kp, ki) on ``grid`` whose accepted-call error over ``items`` lies closest to
    ``alpha``, ties to the one accepting more (an operator's choice on a development
    stream); a pair that accepts nothing is never chosen over one that accepts."""
    if not grid:
        raise ConfigurationError("grid", grid, "must hold at least one (kp, ki) pair")
    scored = []
    for kp, ki in grid:
        steps = run_stream(items, _controller(alpha, form, kp, ki, start))
        err = _error(steps)
        accepted = sum(s.accepted for s in steps)
        gap = 1.0 if err is None else abs(err - alpha)
        scored.append((gap, -accepted, kp, ki))
    _, _, kp, ki = min(scored)
    return kp, ki


def stream_report(
    strong: Sequence[Record],
    weak: Sequence[Record] | None,
    alpha: float,
    window: int,
    *,
    dev: tuple[Sequence[Record], Sequence[Record] | None] | None = None,
) -> dict[str, Any]:
    """The shifted stream under the risk controllers and under fixed thresholds: the one
    an operator tunes before deploying, and the grid's best in hindsight on the whole
    stream. With ``dev`` (the development split's strong and weak records, shifted the
    same way) the fixed threshold and one controller's gains are chosen on that stream;
    without it the fixed threshold is tuned on the stream's own first quarter."""
    items, description = shifted_stream(strong, weak)
    hindsight = choose_threshold(items, alpha, THRESHOLD_GRID)
    runs: dict[str, tuple[str, list[StreamStep]]] = {}
    tuned_gains: dict[Form, tuple[float, float]] = {}
    if dev is not None:
        dev_items, dev_description = shifted_stream(dev[0], dev[1])
        tuned = choose_threshold(dev_items, alpha, THRESHOLD_GRID)
        forms: tuple[Form, ...] = ("raw", "level")
        for form in forms:
            tuned_gains[form] = choose_gains(dev_items, alpha, tuned, form=form)
        tuned_on = f"the development split's shifted stream ({len(dev_items)} tasks)"
        fixed_label = f"fixed τ={tuned:g} (chosen on the development stream)"
    else:
        dev_description = None
        tune = items[: max(1, int(len(items) * TUNE_SHARE))]
        tuned = choose_threshold(tune, alpha, THRESHOLD_GRID)
        tuned_on = f"the first {len(tune)} tasks of the stream (no development bank)"
        fixed_label = f"fixed τ={tuned:g} (tuned on the first {TUNE_SHARE:.0%})"
    runs[fixed_label] = ("fixed", run_stream(items, FixedThreshold(tuned)))
    runs[f"fixed τ={hindsight:g} (best in hindsight)"] = (
        "hindsight",
        run_stream(items, FixedThreshold(hindsight)),
    )
    presets: list[tuple[str, Form, float, float]] = list(CONTROLLERS)
    for form, (kp, ki) in tuned_gains.items():
        where = "on the level " if form == "level" else ""
        label = f"PID {where}kp={kp:g} ki={ki:g} (gains chosen on the development stream)"
        presets.append((label, form, kp, ki))
    for label, form, kp, ki in presets:
        runs[label] = ("controller", run_stream(items, _controller(alpha, form, kp, ki, tuned)))
    out: dict[str, Any] = {
        "alpha": alpha,
        "window": window,
        "stream": description,
        "development_stream": dev_description,
        "tuned_on": tuned_on,
        "gain_grid": [list(g) for g in GAIN_GRID] if tuned_gains else None,
        "runs": {},
    }
    for label, (kind, steps) in runs.items():
        summary = summarise_steps(steps, alpha)
        out["runs"][label] = {
            "kind": kind,
            **summary,
            "within_3_points": _within(summary, 0.03),
            "misses_by_10_points": _misses(summary, 0.10),
            "threshold": [round(s.threshold, 4) for s in steps],
            "rolling_error": [
                None if e is None else round(e, 4) for e in rolling_error(steps, window)
            ],
        }
    tuned_run = next(r for r in out["runs"].values() if r["kind"] == "fixed")
    held = [k for k, r in out["runs"].items() if r["kind"] == "controller" and r["within_3_points"]]
    out["target"] = {
        "controller_within_3_points": held,
        "tuned_fixed_misses_by_10_points": tuned_run["misses_by_10_points"],
        "met": bool(held) and bool(tuned_run["misses_by_10_points"]),
    }
    return out


def _gap(summary: Mapping[str, Any]) -> float | None:
    gap = summary["overall"]["gap_to_alpha"]
    return None if gap is None else abs(float(gap))


def _within(summary: Mapping[str, Any], band: float) -> bool | None:
    gap = _gap(summary)
    return None if gap is None else gap <= band


def _misses(summary: Mapping[str, Any], band: float) -> bool | None:
    # Missed anywhere that matters: overall, or in any phase after the shift.
    gaps = [p["gap_to_alpha"] for p in summary["phases"].values() if p["gap_to_alpha"] is not None]
    return None if not gaps else max(abs(g) for g in gaps) >= band


def plot_stream(report: Mapping[str, Any], path: Any) -> Any:
    """The rolling accepted-call error of each run against alpha, and its threshold."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
    for label, run in report["runs"].items():
        xs = range(len(run["rolling_error"]))
        top.plot(xs, [float("nan") if e is None else e for e in run["rolling_error"]], label=label)
        bottom.plot(xs, run["threshold"], label=label)
    top.axhline(report["alpha"], color="k", linestyle=":", label="α")
    for ax in (top, bottom):
        for key in ("mix_shift_at", "model_switch_at"):
            at = report["stream"].get(key)
            if at:
                ax.axvline(at, color="grey", linestyle="--", lw=0.8)
    top.set_ylabel(f"accepted-call error (last {report['window']} accepted)")
    bottom.set_ylabel("threshold τ")
    bottom.set_xlabel("task in the stream (dashed: family mix shifts; weak model's samples)")
    top.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
