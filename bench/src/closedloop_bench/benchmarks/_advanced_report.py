"""The advanced-control benchmark's report: rows beside plain, spreads, levels, text."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from closedloop.agent import RunResult, plain_view

from ._advanced_parts import DOMAINS, Extras
from ._report import EpisodeResult

__all__ = ["PLAIN", "AdvancedReport", "AdvancedRow", "render_advanced"]

PLAIN = "plain"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True)


class AdvancedRow(_Frozen):
    """One variant on one profile, with the plain row's figures from the same run."""

    part: str
    variant: str
    profile: str
    episodes: int
    success: float
    plain_success: float
    model_calls: float
    plain_model_calls: float
    tokens: float
    plain_tokens: float
    requests: float
    plain_requests: float
    latency_s: float
    plain_latency_s: float
    first_error: float | None
    plain_first_error: float | None
    note: str = ""


class AdvancedReport(_Frozen):
    """Everything one run measured (written as JSON)."""

    config: dict[str, Any]
    tuning: dict[str, Any]
    rows: list[AdvancedRow]
    spread: dict[str, dict[str, Any]]
    levels: list[dict[str, Any]]
    plain_view: dict[str, Any]
    wall_s: float


def _mean(values: Sequence[float | None]) -> float | None:
    real = [v for v in values if v is not None]
    return statistics.fmean(real) if real else None


def _spread(results: Sequence[EpisodeResult], name: str) -> dict[str, Any]:
    rates = {}
    for domain in DOMAINS:
        mine = [r.success for r in results if r.strategy == name and r.domain == domain]
        if mine:
            rates[domain] = sum(mine) / len(mine)
    values = list(rates.values())
    return {
        "per_domain": rates,
        "std": statistics.pstdev(values) if len(values) > 1 else 0.0,
        "range": (max(values) - min(values)) if values else 0.0,
        "variance": statistics.pvariance(values) if len(values) > 1 else 0.0,
    }


def _auc(pos: Sequence[float], neg: Sequence[float]) -> float | None:
    """P(score of a failed run > score of a successful one), ties half."""
    if not pos or not neg:
        return None
    wins = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


def _row(
    part: str,
    name: str,
    profile: str,
    results: Sequence[EpisodeResult],
    extras: Extras,
    note: str = "",
) -> AdvancedRow:
    def stats(strategy: str) -> tuple[float, float, float, float, float, float | None]:
        mine = [r for r in results if r.strategy == strategy]
        n = max(1, len(mine))
        return (
            sum(r.success for r in mine) / n,
            sum(r.model_calls for r in mine) / n,
            sum(r.prompt_tokens + r.completion_tokens for r in mine) / n,
            sum(r.requests for r in mine) / n,
            sum(r.latency_s for r in mine) / n,
            _mean([extras.get(strategy, r.task_id).get("first_error") for r in mine]),
        )

    s, c, t, q, lat, fe = stats(name)
    ps, pc, pt, pq, plat, pfe = stats(PLAIN)
    return AdvancedRow(
        part=part,
        variant=name,
        profile=profile,
        episodes=sum(1 for r in results if r.strategy == name),
        success=s,
        plain_success=ps,
        model_calls=c,
        plain_model_calls=pc,
        tokens=t,
        plain_tokens=pt,
        requests=q,
        plain_requests=pq,
        latency_s=lat,
        plain_latency_s=plat,
        first_error=fe,
        plain_first_error=pfe,
        note=note,
    )


LEVEL_NAMES = {0.0: "normal", 0.5: "warning (cheap checks)", 1.0: "dual verification"}


def _levels(results: Sequence[EpisodeResult], extras: Extras, profile: str) -> list[dict[str, Any]]:
    out = []
    for name in (PLAIN, "tiered", "prewarm+tiered"):
        groups: dict[float, list[EpisodeResult]] = {}
        for r in results:
            if r.strategy == name:
                groups.setdefault(float(extras.get(name, r.task_id).get("level", 0.0)), []).append(
                    r
                )
        for level, mine in sorted(groups.items()):
            out.append(
                {
                    "profile": profile,
                    "variant": name,
                    "level": LEVEL_NAMES.get(level, f"protocol level {level:g}"),
                    "episodes": len(mine),
                    "success": sum(r.success for r in mine) / len(mine),
                    "model_calls": statistics.fmean(r.model_calls for r in mine),
                    "tokens": statistics.fmean(r.prompt_tokens + r.completion_tokens for r in mine),
                    "requests": statistics.fmean(r.requests for r in mine),
                    "cheap_checks": sum(
                        int(extras.get(name, r.task_id).get("checks", 0)) for r in mine
                    ),
                }
            )
    return out


def _plain_figures(results: Sequence[EpisodeResult], extras: Extras) -> dict[str, Any]:
    failed: list[float] = []
    passed: list[float] = []
    for r in results:
        if r.strategy != PLAIN:
            continue
        run = extras.get(PLAIN, r.task_id).get("run")
        if not isinstance(run, RunResult):
            continue
        (passed if r.success else failed).append(float(plain_view(run).risk))
    return {
        "runs": len(failed) + len(passed),
        "mean_risk_failed": _mean(failed),
        "mean_risk_succeeded": _mean(passed),
        "auc_risk_flags_failure": _auc(failed, passed),
    }


def _fmt(v: float | None, pct: bool = False) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    return f"{100 * v:.1f} %" if pct else f"{v:.2f}"


def render_advanced(report: AdvancedReport) -> str:
    """The report as Markdown tables (what ``bench/advanced.py`` prints)."""
    out = [
        "| part | variant | profile | n | success (plain) | model calls (plain) "
        "| requests (plain) | latency s (plain) | first-step error (plain) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report.rows:
        out.append(
            f"| {r.part} | {r.variant} | {r.profile} | {r.episodes} "
            f"| {_fmt(r.success, True)} ({_fmt(r.plain_success, True)}) "
            f"| {_fmt(r.model_calls)} ({_fmt(r.plain_model_calls)}) "
            f"| {_fmt(r.requests)} ({_fmt(r.plain_requests)}) "
            f"| {_fmt(r.latency_s)} ({_fmt(r.plain_latency_s)}) "
            f"| {_fmt(r.first_error)} ({_fmt(r.plain_first_error)}) |"
        )
    notes = [f"- {r.variant} ({r.profile}): {r.note}" for r in report.rows if r.note]
    if notes:
        out += ["", *notes]
    out += [
        "",
        "| spread across domains | std | max−min | variance vs fixed | per domain |",
        "|---|---|---|---|---|",
    ]
    for key, s in report.spread.items():
        per = ", ".join(f"{d} {100 * v:.0f} %" for d, v in s["per_domain"].items())
        fixed = report.spread.get(key.split(":")[0] + ":fixed", {}).get("variance", 0.0)
        change = (
            f"{100 * (s['variance'] / fixed - 1):+.0f} %"
            if fixed and not key.endswith(":fixed")
            else "–"
        )
        out.append(
            f"| {key} | {_fmt(s['std'], True)} | {_fmt(s['range'], True)} | {change} | {per} |"
        )
    out += [
        "",
        "| profile | variant | level | n | success | model calls | requests | cheap checks |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for lv in report.levels:
        out.append(
            f"| {lv['profile']} | {lv['variant']} | {lv['level']} | {lv['episodes']} "
            f"| {_fmt(lv['success'], True)} | {_fmt(lv['model_calls'])} "
            f"| {_fmt(lv['requests'])} | {lv['cheap_checks']} |"
        )
    out += ["", f"tuning: {report.tuning.get('message')}"]
    for key in ("table_dev_success", "predictor_dev_success_loo", "predictor_kept"):
        if key in report.tuning:
            out.append(f"{key}: {report.tuning[key]}")
    for profile, fig in report.plain_view.items():
        out.append(
            f"plain view ({profile}): risk score of failed runs {_fmt(fig['mean_risk_failed'])}, "
            f"of successful runs {_fmt(fig['mean_risk_succeeded'])}, "
            f"AUC {_fmt(fig['auc_risk_flags_failure'])} over {fig['runs']} runs"
        )
    out.append(f"wall time: {report.wall_s:.0f} s")
    return "\n".join(out)
