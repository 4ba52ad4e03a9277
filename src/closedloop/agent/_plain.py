"""The control terms in the words of the people who operate agents.

One pure function, :func:`plain_view`, reads a run's step records and says what the
control did, each line with the measured figure beside it: f_est becomes a risk score,
the PID's integral term the repeated failures it answered, the protocol levels automatic
safety actions, u the extra care taken. :func:`render_plain` is the same as text for the
run report; the dashboard reads ``PlainView.as_dict()``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..control import Protocol, select_protocol
from ._records import RunResult, StepRecord

__all__ = ["PlainLine", "PlainView", "plain_view", "render_plain", "risk_label"]

_RISK = {
    Protocol.NORMAL: "low",
    Protocol.DUAL_VERIFICATION: "elevated",
    Protocol.DIMENSION_REDUCTION: "high",
    Protocol.MANUAL_HANDOVER: "critical",
}

_ACTION = {
    Protocol.DUAL_VERIFICATION: "double-checked the proposal (asked again, ran the call most samples made)",
    Protocol.DIMENSION_REDUCTION: "narrowed the scope to the essential tools",
    Protocol.MANUAL_HANDOVER: "stopped and handed the task to a person",
}

FAILED = 0.5
"""A step with an error at or above this counts as a failure in the plain view."""


@dataclass(frozen=True, slots=True)
class PlainLine:
    """One translated term: the technical name, what it means here, and the figure."""

    term: str
    plain: str
    figure: str

    def as_dict(self) -> dict[str, str]:
        """The line as JSON data."""
        return {"term": self.term, "plain": self.plain, "figure": self.figure}


@dataclass(frozen=True, slots=True)
class PlainView:
    """A run's control, in plain language; ``risk`` is the peak risk score (0–100)."""

    risk: int
    risk_label: str
    lines: tuple[PlainLine, ...]

    def as_dict(self) -> dict[str, Any]:
        """The view as JSON data."""
        return {
            "risk": self.risk,
            "risk_label": self.risk_label,
            "lines": [line.as_dict() for line in self.lines],
        }


def _pct(x: float) -> int:
    # Half up, as the dashboard's Math.round does (Python's round() goes to even).
    return math.floor(100 * x + 0.5)


def risk_label(f_est: float, thresholds: Sequence[float] = (0.4, 0.6, 0.8)) -> str:
    """``low``/``elevated``/``high``/``critical``: the protocol level ``f_est`` reaches."""
    return _RISK[select_protocol(min(1.0, max(0.0, f_est)), thresholds)]


def _recoveries(steps: Sequence[StepRecord]) -> tuple[int, int]:
    """(failures followed by a success of the same step type while the integral term was
    working, failures in all)."""
    avoided = failures = 0
    open_failure: dict[str, bool] = {}
    for s in steps:
        failed = s.error >= FAILED
        if failed:
            failures += 1
            open_failure[s.step_type] = True
        elif open_failure.pop(s.step_type, False) and s.pid_components[1] > 0.0:
            avoided += 1
    return avoided, failures


def plain_view(
    result: RunResult | Sequence[StepRecord], thresholds: Sequence[float] = (0.4, 0.6, 0.8)
) -> PlainView:
    """Translate a run (or its step records) into plain-language lines with figures."""
    steps = list(result.steps if isinstance(result, RunResult) else result)
    if not steps:
        line = PlainLine("run", "the run took no step; there is nothing to explain", "0 steps")
        return PlainView(0, "low", (line,))
    peak = max(s.f_est for s in steps)
    last = steps[-1].f_est
    label = risk_label(peak, thresholds)
    risk = _pct(peak)
    lines = [
        PlainLine(
            "f_est (ESO total-disturbance estimate)",
            f"risk score: how likely this task was to go wrong; it peaked {label}",
            f"peak {risk}/100, at the end {_pct(last)}/100",
        )
    ]
    avoided, failures = _recoveries(steps)
    integral = max(s.pid_components[1] for s in steps)
    lines.append(
        PlainLine(
            "PID integral term (Ki)",
            "memory of repeated failures: after a failure the next try of the same step "
            "was made more carefully",
            f"{avoided} of {failures} failed steps recovered on a later try "
            f"(integral peak {integral:.2f})",
        )
    )
    counts: dict[Protocol, int] = {}
    for s in steps:
        p = Protocol(s.protocol)
        counts[p] = counts.get(p, 0) + 1
    actions = [f"{_ACTION[p]}: {counts[p]} step(s)" for p in _ACTION if counts.get(p)]
    lines.append(
        PlainLine(
            "ADRC protocol levels",
            "automatic safety actions, like a car's stability control: small problems are "
            "corrected, large ones stop the car" + ("" if actions else "; none was needed"),
            "; ".join(actions) if actions else f"all {len(steps)} steps ran normally",
        )
    )
    mean_u = sum(s.control for s in steps) / len(steps)
    lines.append(
        PlainLine(
            "control signal u",
            "extra care taken (stricter output format, longer waits between retries)",
            f"average {_pct(mean_u)} % of the maximum over {len(steps)} steps",
        )
    )
    return PlainView(risk, label, tuple(lines))


def render_plain(view: PlainView) -> str:
    """The plain view as Markdown lines for the run report."""
    out = [f"**Risk: {view.risk}/100 ({view.risk_label})**", ""]
    for line in view.lines:
        out.append(f"- {line.plain} — **{line.figure}** _({line.term})_")
    return "\n".join(out)
