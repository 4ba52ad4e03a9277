"""Calibration of the confidence sensors against the checker's verdict on the first proposal.

For each task the constrained single call (``strict``) is sampled k times from one prompt:
the first greedily with token logprobs (the proposal that would run), the rest at a
temperature for agreement. Each sensor's reading is compared with whether the checker
accepts the first proposal: AUROC (the probability that a right proposal reads higher
than a wrong one; 0.5 is a useless sensor) and expected calibration error (Naeini et al.
2015: the bin-weighted gap between confidence and accuracy), with a reliability diagram.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from closedloop.models import Model, ModelRequest
from closedloop.models._confidence import agreement_of

from ._format import ToolTask
from ._prompt import ParsedReply, build_messages, parse_reply, reply_from_value, strict_schema
from ._score import score

__all__ = ["Reading", "auroc", "calibration_report", "ece", "read_task", "reliability"]

SENSORS = ("agreement", "margin", "p_mean", "p_min", "p_low", "agreement_x_p_low")
"""Each sensor as a probability in [0, 1]: logprobs enter as exp(logprob)."""
USELESS_BAND = 0.05
"""An AUROC within this of 0.5 is reported as a useless sensor."""


def auroc(scores: Sequence[float], labels: Sequence[bool]) -> float | None:
    """Area under the ROC curve by the rank-sum (Mann-Whitney U) form, ties counted half;
    None when one class is absent."""
    pos = [s for s, y in zip(scores, labels, strict=True) if y]
    neg = [s for s, y in zip(scores, labels, strict=True) if not y]
    if not pos or not neg:
        return None
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


def reliability(
    probs: Sequence[float], labels: Sequence[bool], bins: int = 10
) -> list[dict[str, float]]:
    """Equal-width bins of confidence: count, mean confidence and accuracy of each non-empty one."""
    out: list[dict[str, float]] = []
    for b in range(bins):
        lo, hi = b / bins, (b + 1) / bins
        idx = [i for i, p in enumerate(probs) if lo <= p < hi or (b == bins - 1 and p == 1.0)]
        if idx:
            out.append(
                {
                    "lo": lo,
                    "hi": hi,
                    "n": float(len(idx)),
                    "confidence": sum(probs[i] for i in idx) / len(idx),
                    "accuracy": sum(1.0 for i in idx if labels[i]) / len(idx),
                }
            )
    return out


def ece(probs: Sequence[float], labels: Sequence[bool], bins: int = 10) -> float | None:
    """Expected calibration error over equal-width bins; None for no readings."""
    if not probs:
        return None
    total = len(probs)
    return sum(
        b["n"] / total * abs(b["confidence"] - b["accuracy"])
        for b in reliability(probs, labels, bins)
    )


@dataclass(frozen=True, slots=True)
class Reading:
    """One task's sensor readings (None where a sensor read nothing) and the verdict."""

    task_id: str
    family: str
    success: bool
    sensors: Mapping[str, float | None]
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "family": self.family,
            "success": self.success,
            "sensors": dict(self.sensors),
            "seconds": self.seconds,
        }


def _reply(parsed: Any, text: str) -> ParsedReply:
    return reply_from_value(parsed) if parsed is not None else parse_reply(text)


def _key(reply: ParsedReply) -> str | None:
    if reply.error is not None:
        return None
    calls = sorted(json.dumps([c.name, dict(c.arguments)], sort_keys=True) for c in reply.calls)
    return json.dumps([calls, "" if calls else "no-call"])


async def read_task(
    task: ToolTask,
    model: Model,
    *,
    k: int = 3,
    temperature: float = 0.7,
    max_tokens: int = 160,
    clock: Callable[[], float] = time.perf_counter,
) -> Reading:
    """k samples of the strict single call for ``task``; the first (greedy) is judged."""
    started = clock()
    schema = strict_schema(task)
    messages = build_messages(task)
    keys: list[str | None] = []
    first = None
    for i in range(k):
        request = ModelRequest(
            response_schema=schema,
            max_tokens=max_tokens,
            temperature=0.0 if i == 0 else temperature,
            seed=i,
            logprobs=i == 0,
        )
        completion = await model.complete(messages, request)
        reply = _reply(completion.parsed, completion.text)
        keys.append(_key(reply))
        if first is None:
            first = (completion, reply)
    assert first is not None
    completion, reply = first
    verdict = score(task, reply.calls, reply.text).success if reply.error is None else False
    # The judged proposal is the greedy one, so agreement is the share of samples that make
    # its call (not the top call's share, which may be another call).
    _, margin = agreement_of(keys)
    agreement = 0.0 if keys[0] is None else keys.count(keys[0]) / k
    conf = completion.confidence

    def p(value: float | None) -> float | None:
        return None if value is None else math.exp(value)

    p_low = p(conf.logprob_low) if conf else None
    sensors: dict[str, float | None] = {
        "agreement": agreement if k > 1 else None,
        "margin": margin if k > 1 else None,
        "p_mean": p(conf.logprob_mean) if conf else None,
        "p_min": p(conf.logprob_min) if conf else None,
        "p_low": p_low,
        "agreement_x_p_low": None if p_low is None or k < 2 else agreement * p_low,
    }
    return Reading(task.id, task.family, verdict, sensors, clock() - started)


def _summary(readings: Sequence[Reading], sensors: Sequence[str] = SENSORS) -> dict[str, Any]:
    out: dict[str, Any] = {"n": len(readings), "success": sum(r.success for r in readings)}
    for name in sensors:
        pairs = [(r.sensors[name], r.success) for r in readings if r.sensors.get(name) is not None]
        probs = [float(s) for s, _ in pairs if s is not None]
        labels = [y for _, y in pairs]
        area = auroc(probs, labels)
        out[name] = {
            "n": len(probs),
            "auroc": area,
            "ece": ece(probs, labels),
            "useless": None if area is None else abs(area - 0.5) <= USELESS_BAND,
            "reliability": reliability(probs, labels),
        }
    return out


def calibration_report(
    model: str, readings: Sequence[Reading], sensors: Sequence[str] = SENSORS, **meta: Any
) -> dict[str, Any]:
    """AUROC and ECE of each sensor (by name in the readings), overall and per task family,
    with the readings."""
    families = sorted({r.family for r in readings})
    return {
        "model": model,
        **meta,
        "sensors": list(sensors),
        "overall": _summary(readings, sensors),
        "families": {
            f: _summary([r for r in readings if r.family == f], sensors) for f in families
        },
        "readings": [r.as_dict() for r in readings],
    }


def plot_reliability(report: Mapping[str, Any], path: Path) -> Path:
    """The reliability diagram of each sensor (accuracy against confidence per bin)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 5))
    ax.plot([0, 1], [0, 1], color="grey", linestyle=":", label="calibrated")
    for name in report.get("sensors", SENSORS):
        bins = report["overall"][name]["reliability"]
        if bins:
            area = report["overall"][name]["auroc"]
            label = f"{name} (AUROC {area:.2f})" if area is not None else name
            ax.plot(
                [b["confidence"] for b in bins],
                [b["accuracy"] for b in bins],
                marker="o",
                label=label,
            )
    ax.set_xlabel("sensor confidence")
    ax.set_ylabel("share of first proposals the checker accepts")
    ax.set_title(f"{report['model']}: {report['overall']['n']} tasks")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
