"""The replay as a command: the plane, the shifted stream and the calibration from banks.

``bench/tools_replay.py`` runs :func:`run_replay`: it loads one bank (the strong model)
and optionally a second (the weak model, for the cascade and the degraded stream),
re-scores every sample, replays every strategy of :func:`strategy_grid` and writes three
reports, each recording the command that rewrites it:

- ``plane.json`` (+ png): success and cost per strategy with intervals, paired against
  the strong model's single call, and the frontier of fixed settings;
- ``stream.json`` (+ png): the risk controller against fixed thresholds on the shifted
  stream, with the realised accepted-call error along it;
- ``calibration-bank.json`` (+ a png per model): AUROC and ECE of each sensor against the
  checker's verdict on the first sample, per model and family.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from closedloop import ConfigurationError
from closedloop.agent import Sampling
from closedloop.control import BetaStop, ConfidenceStop, ConformalPID, WindowStop
from closedloop.perception import IsotonicCalibration

from ._abstention import abstention_report
from ._bank import read_bank
from ._calibration import Reading, calibration_report, plot_reliability
from ._format import ToolTask, load_tool_tasks
from ._generate import DATA_DIR
from ._plane import Row, mcnemar_exact, paired_bootstrap, plane_report, plot_plane
from ._replay import (
    Abstaining,
    AdaptiveVotes,
    Cascade,
    ConfidentSingle,
    Outcome,
    Record,
    Votes,
)
from ._replay import records_from_bank as records_from_bank
from ._stream import StreamItem, StreamStep, plot_stream, run_stream, stream_report

__all__ = [
    "BANK_SENSORS",
    "ReplayOptions",
    "dev_choices",
    "load_records",
    "run_replay",
    "strategy_grid",
]

RESULTS = Path("bench/results/tools")
BANK_SENSORS = (
    "p_low",
    "p_min",
    "p_mean",
    "agreement@3",
    "agreement@5",
    "p_low_x_agreement@3",
    "p_low_x_agreement@5",
)
"""The sensors the calibration reads from a bank, each a probability in [0, 1]."""
CASCADE_TAUS = (0.0, 0.2, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 1.0)
ABSTAIN_FLOORS = (0.1, 0.2, 0.3, 0.4, 0.5)
RISK_ALPHAS = (0.05, 0.1, 0.2)


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplayOptions:
    """The command's options."""

    bank: Path
    weak_bank: Path | None = None
    tasks: Path = DATA_DIR / "eval.jsonl"
    dev_bank: Path | None = None
    dev_weak_bank: Path | None = None
    dev_tasks: Path = DATA_DIR / "dev.jsonl"
    out_dir: Path = RESULTS
    alpha: float = 0.1
    window: int = 40
    command: str = ""


def load_records(path: Path, tasks: Path) -> tuple[dict[str, Any], list[Record]]:
    """A bank's header and records, each sample re-scored against the task file."""
    header, rows = read_bank(path)
    if not header:
        raise ConfigurationError("bank", str(path), "holds no header (missing or empty file)")
    return header, records_from_bank(header, rows, _tasks_by_id(tasks.resolve()))


@functools.lru_cache(maxsize=4)
def _tasks_by_id(path: Path) -> dict[str, ToolTask]:
    # Validating the task file is most of a replay's time: read it once per process.
    return {t.id: t for t in load_tool_tasks(path)}


def strategy_grid(k: int) -> list[tuple[Any, str]]:
    """Every single-model strategy the plane replays from a bank of ``k`` samples, with
    its group (``fixed`` or ``adaptive``)."""
    out: list[tuple[Any, str]] = [(Votes(1), "fixed")]
    out += [(Votes(n), "fixed") for n in (3, 5) if n <= k]
    out += [(Votes(n, weighted=True), "fixed") for n in (3, 5) if n <= k]
    rules: list[tuple[Any, str]] = [
        (BetaStop(threshold=t, max_samples=k), f"beta≥{t:g}") for t in (0.8, 0.9, 0.95)
    ]
    rules += [(WindowStop(window=w, max_samples=k), f"window {w}") for w in (2, 3) if w <= k]
    rules += [(ConfidenceStop(threshold=t, max_samples=k), f"p_low≥{t:g}") for t in (0.5, 0.8, 0.9)]
    out += [(AdaptiveVotes(rule, label, max_k=k), "adaptive") for rule, label in rules]
    out += [
        (ConfidentSingle(t, fallback_k=f), "adaptive")
        for f in (3, 5)
        if f <= k
        for t in (0.5, 0.8, 0.9, 0.95)
    ]
    out += _agent_confident(k)
    inners: list[Votes | ConfidentSingle] = [Votes(1)]
    inners += [ConfidentSingle(0.8, fallback_k=3)] if k >= 3 else []
    out += [(Abstaining(inner, b), "abstain") for inner in inners for b in ABSTAIN_FLOORS]
    return out


def _abstaining(records: Sequence[Record]) -> list[Abstaining]:
    """The plane's abstaining strategies (those a bank of these records can replay)."""
    k = min(len(r.samples) for r in records)
    return [s for s, group in strategy_grid(k) if group == "abstain"]


def _agent_confident(k: int) -> list[tuple[Any, str]]:
    """The agent's confident call (``Sampling(stop="auto")`` with logprobs) replayed
    exactly, as the agent draws and votes."""
    rule = Sampling(stop="auto").rule(True)
    if not isinstance(rule, ConfidenceStop) or rule.max_samples > k:
        return []
    label = f"agent: p_low≥{rule.threshold:g}, weighted, ≤{rule.max_samples}"
    return [(AdaptiveVotes.as_agent(rule, label), "adaptive")]


def agent_confident_report(rows: Sequence[Row]) -> dict[str, Any]:
    """Per model, the agent's confident call against that model's own single call,
    paired per task, and against its best fixed setting that draws no more calls a task
    (above that model's own frontier by ``above_own_frontier_by``, a fraction of tasks)."""
    by = {(r.model, r.name): r for r in rows}
    out: dict[str, Any] = {}
    for row in rows:
        single = by.get((row.model, "single"))
        if not row.name.startswith("adaptive[agent:") or single is None:
            continue
        a, b = [o.success for o in row.outcomes], [o.success for o in single.outcomes]
        calls = _mean_calls(row)
        fixed = [r for r in rows if r.model == row.model and r.group == "fixed"]
        best = max(
            (r for r in fixed if _mean_calls(r) <= calls),
            key=lambda r: (sum(o.success for o in r.outcomes), -_mean_calls(r)),
        )
        best_success = sum(o.success for o in best.outcomes)
        out[row.model] = {
            "strategy": row.name,
            "n": len(a),
            "success": sum(a),
            "single": sum(b),
            "mean_calls": calls,
            "paired_with_single": mcnemar_exact(a, b),
            "difference": paired_bootstrap([float(x) for x in a], [float(y) for y in b]),
            "best_fixed_at_no_more_calls": {
                "name": best.name,
                "success": best_success,
                "mean_calls": _mean_calls(best),
            },
            "above_own_frontier_by": (sum(a) - best_success) / len(a),
        }
    return out


def _mean_calls(row: Row) -> float:
    return sum(o.calls for o in row.outcomes) / len(row.outcomes)


def dev_choices(records: Sequence[Record]) -> dict[str, str]:
    """The settings an operator picks on the development bank, by group: the confident
    single call and the abstaining strategy with the most tasks solved there (ties to
    the fewer calls), each by its row name."""
    k = min(len(r.samples) for r in records)
    best: dict[str, tuple[int, float, str]] = {}
    for strategy, group in strategy_grid(k):
        kind = (
            "abstain"
            if group == "abstain"
            else ("confident" if isinstance(strategy, ConfidentSingle) else None)
        )
        if kind is None:
            continue
        outcomes = [strategy.replay([r]) for r in records]
        solved = sum(o.success for o in outcomes)
        calls = sum(o.calls for o in outcomes) / len(outcomes)
        mine = (solved, -calls, strategy.name)
        if kind not in best or mine[:2] > best[kind][:2]:
            best[kind] = mine
    return {kind: name for kind, (_, _, name) in best.items()}


def cascade_grid(weak_k: int, strong_k: int) -> list[Cascade]:
    """The cascades on a threshold grid: the weak first sample's p_low, and the weak
    vote's agreement (3 samples) with the strong single call or vote of 3."""
    out = [Cascade(t, "p_low", 1, 1) for t in CASCADE_TAUS]
    if weak_k >= 3:
        for strong in (1, 3):
            if strong <= strong_k:
                out += [Cascade(t, "agreement", 3, strong) for t in (0.5, 0.9)]
    return out


def _aligned(strong: Sequence[Record], weak: Sequence[Record] | None) -> tuple[list[Record], ...]:
    # Paired comparisons need the same tasks on every row: keep the tasks both banks hold.
    if weak is None:
        return (list(strong),)
    common = {r.task_id for r in strong} & {r.task_id for r in weak}
    weak_by = {r.task_id: r for r in weak}
    s = [r for r in strong if r.task_id in common]
    return s, [weak_by[r.task_id] for r in s]


def _risk_outcomes(steps: Sequence[StreamStep]) -> tuple[Outcome, ...]:
    return tuple(
        Outcome(s.task_id, s.family, s.accepted and not s.wrong, s.accepted, s.seconds, s.tokens, 1)
        for s in steps
    )


def _risk_rows(records: Sequence[Record]) -> list[Row]:
    rows = []
    for alpha in RISK_ALPHAS:
        pid = ConformalPID(alpha, 0.0, 0.05, 0.0, start=0.5, limits=(0.0, 0.999))
        steps = run_stream([StreamItem(r, "all") for r in records], pid)
        rows.append(Row(f"risk[α={alpha:g}]", records[0].model, "risk", _risk_outcomes(steps)))
    return rows


def plane_rows(strong: Sequence[Record], weak: Sequence[Record] | None) -> list[Row]:
    """Every strategy's row on the aligned tasks of one or two banks."""
    banks = _aligned(strong, weak)
    rows: list[Row] = []
    for records in banks:
        k = min(len(r.samples) for r in records)
        for strategy, group in strategy_grid(k):
            outcomes = tuple(strategy.replay([r]) for r in records)
            rows.append(Row(strategy.name, records[0].model, group, outcomes))
        rows += _risk_rows(records)
    if weak is not None:
        s, w = banks
        ladder = f"{w[0].model} → {s[0].model}"
        kw, ks = min(len(r.samples) for r in w), min(len(r.samples) for r in s)
        for cascade in cascade_grid(kw, ks):
            outcomes = tuple(cascade.replay([a, b]) for a, b in zip(w, s, strict=True))
            rows.append(Row(cascade.name, ladder, "fixed", outcomes))
    return rows


def _agreement(record: Record, k: int) -> float | None:
    keys = [s.key for s in record.samples[:k]]
    if len(keys) < k:
        return None
    # The judged proposal is the first sample: its call's share, as the live calibration reads.
    return 0.0 if keys[0] is None else keys.count(keys[0]) / k


def _calibrations(
    dev: tuple[list[Record], list[Record] | None] | None,
) -> dict[str, IsotonicCalibration]:
    """Per model, p_low's isotonic calibration fitted on its development bank."""
    out: dict[str, IsotonicCalibration] = {}
    for records in () if dev is None else (dev[0], dev[1] or []):
        if records:
            first = [r.samples[0] for r in records]
            scores = [0.0 if s.p_low is None else s.p_low for s in first]
            out[records[0].model] = IsotonicCalibration.fit(scores, [s.ok for s in first])
    return out


def bank_readings(
    records: Sequence[Record], calibrated: IsotonicCalibration | None = None
) -> list[Reading]:
    """Each task's sensor readings of its first sample, with the checker's verdict on it."""
    out = []
    for r in records:
        first = r.samples[0]
        a3, a5 = _agreement(r, 3), _agreement(r, 5)
        sensors: dict[str, float | None] = {
            "p_low": first.p_low,
            "p_min": first.p_min,
            "p_mean": first.p_mean,
            "agreement@3": a3,
            "agreement@5": a5,
            "p_low_x_agreement@3": None if a3 is None or first.p_low is None else a3 * first.p_low,
            "p_low_x_agreement@5": None if a5 is None or first.p_low is None else a5 * first.p_low,
        }
        if calibrated is not None:
            sensors["p_low_calibrated"] = calibrated(0.0 if first.p_low is None else first.p_low)
        out.append(Reading(r.task_id, r.family, first.ok, sensors, first.seconds))
    return out


def _write(path: Path, data: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    return path


def _dev_records(options: ReplayOptions) -> tuple[list[Record], list[Record] | None] | None:
    """The development split's records (strong, weak), where a development bank is given."""
    if options.dev_bank is None:
        if options.dev_weak_bank is not None:
            raise ConfigurationError(
                "--dev-weak-bank", str(options.dev_weak_bank), "needs --dev-bank as well"
            )
        return None
    _, strong = load_records(options.dev_bank, options.dev_tasks)
    if not strong:
        raise ConfigurationError("--dev-bank", str(options.dev_bank), "holds no task yet")
    weak = None
    if options.dev_weak_bank is not None:
        _, weak = load_records(options.dev_weak_bank, options.dev_tasks)
    return strong, weak


def run_replay(options: ReplayOptions, *, say: Callable[[str], None] = print) -> dict[str, Path]:
    """Load the banks, replay, write the three reports (and plots); their paths by name."""
    if not 0.0 < options.alpha < 1.0:
        raise ConfigurationError("--alpha", options.alpha, "must lie in (0, 1)")
    header, strong = load_records(options.bank, options.tasks)
    weak = None
    weak_header: dict[str, Any] = {}
    if options.weak_bank is not None:
        weak_header, weak = load_records(options.weak_bank, options.tasks)
    if not strong:
        raise ConfigurationError("bank", str(options.bank), "holds no task yet")
    meta = {
        "command": options.command,
        "banks": {
            h["model"]: {"n": len(recs), "k": h.get("k"), "temperature": h.get("temperature")}
            for h, recs in ((header, strong), (weak_header, weak or []))
            if h
        },
        "confidence": "exp(logprob_low) of the decision tokens",
    }
    out = options.out_dir
    dev = _dev_records(options)
    if dev is not None:
        meta["development_banks"] = {
            recs[0].model: {"n": len(recs)} for recs in (dev[0], dev[1] or []) if recs
        }
    rows = plane_rows(strong, weak)
    reference = f"{strong[0].model} · single"
    plane = {**meta, **plane_report(rows, reference)}
    if dev is not None:
        plane["chosen_on_development"] = {
            recs[0].model: dev_choices(recs) for recs in (dev[0], dev[1] or []) if recs
        }
    plane["targets"] = plane_targets(plane)
    plane["agent_confident_call"] = agent_confident_report(rows)
    plane["abstention"] = abstention_report(
        (strong, weak or []), _abstaining([*strong, *(weak or [])]), _calibrations(dev)
    )
    paths = {"plane": _write(out / "plane.json", plane)}
    paths["plane_png"] = plot_plane(plane, out / "plane.png")
    # The two-model plane holds only the tasks both banks share; each bank's own plane
    # holds every task it has, so a bank recorded further is judged on all of it.
    for records in (strong, weak or []):
        if records and len(records) > plane["n"]:
            model = records[0].model
            own = {**meta, **plane_report(plane_rows(records, None), f"{model} · single")}
            own["targets"] = plane_targets(own)
            paths[f"plane_{model}"] = _write(out / f"plane-{model}.json", own)
            paths[f"plane_png_{model}"] = plot_plane(own, out / f"plane-{model}.png")
    stream = {**meta, **stream_report(strong, weak, options.alpha, options.window, dev=dev)}
    paths["stream"] = _write(out / "stream.json", stream)
    paths["stream_png"] = plot_stream(stream, out / "stream.png")
    calibration: dict[str, Any] = {**meta, "models": {}}
    fits = _calibrations(dev)
    if fits:
        calibration["p_low_calibrated"] = (
            "p_low through isotonic regression fitted on the development bank of the same model"
        )
    for records in (strong, weak or []):
        if records:
            model = records[0].model
            fit = fits.get(model)
            sensors = (*BANK_SENSORS, "p_low_calibrated") if fit else BANK_SENSORS
            report = calibration_report(model, bank_readings(records, fit), sensors)
            png = plot_reliability(report, out / f"calibration-bank-{model}.png")
            # The readings are the bank's own numbers: keep the report to the summaries.
            calibration["models"][model] = {k: v for k, v in report.items() if k != "readings"}
            paths[f"calibration_png_{model}"] = png
    paths["calibration"] = _write(out / "calibration-bank.json", calibration)
    for name, path in paths.items():
        say(f"{name}: {path}")
    return paths


def _labels(rows: Sequence[dict[str, Any]]) -> list[str]:
    return [f"{r['model']} · {r['name']}" for r in rows]


def plane_targets(plane: dict[str, Any]) -> dict[str, Any]:
    """The plane's targets on point estimates (the intervals are in the rows): adaptive
    votes at votes@5's success with at most half its samples; the confident single call
    never below the single call; a cascade at the strong model's success (same votes) at
    most 60 % of its seconds."""
    rows = plane["rows"]
    by = {(r["model"], r["name"]): r for r in rows}
    out: dict[str, Any] = {"adaptive": {}, "confident": {}}
    for model in dict.fromkeys(r["model"] for r in rows if "→" not in r["model"]):
        five, one = by.get((model, "votes@5")), by[(model, "single")]
        mine = [r for r in rows if r["model"] == model]
        if five is not None:
            winners = _labels(
                [
                    r
                    for r in mine
                    if r["group"] == "adaptive"
                    and r["success"] >= five["success"]
                    and r["mean_calls"] <= 0.5 * five["mean_calls"]
                ]
            )
            out["adaptive"][model] = {"met": bool(winners), "by": winners}
        below = _labels(
            [r for r in mine if r["name"].startswith("confident") and r["success"] < one["success"]]
        )
        out["confident"][model] = {"met": not below, "below_single": below}
    cascades = [r for r in rows if r["name"].startswith("cascade")]
    if cascades:
        strong = cascades[0]["model"].split(" → ")[1]
        met = []
        for r in cascades:
            ref = by.get((strong, "single" if r["name"].endswith("→1") else "votes@3"))
            if (
                ref
                and r["success"] >= ref["success"]
                and r["mean_seconds"] <= 0.6 * ref["mean_seconds"]
            ):
                met.append(r["name"])
        out["cascade"] = {"met": bool(met), "by": met}
    return out
