"""Success and cost against the regimes' onset rate λ: the curve a fault-rate sweep
(profiles ``NAME@λ``) draws, and its plot with the controller-on minus frozen difference."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ._claims import mean
from ._report import EpisodeResult, LambdaCurve, LambdaPoint, OnVsFrozen
from ._stats import rate

__all__ = ["lambda_curves", "plot_lambda", "profile_lambda"]


def profile_lambda(profile: str) -> tuple[str, float] | None:
    """``("regimes", 0.2)`` for ``"regimes@0.2"``; None for a profile without ``@λ``."""
    base, at, text = profile.rpartition("@")
    if not (at and base):
        return None
    try:
        return base, float(text)
    except ValueError:
        return None


def lambda_curves(rows: Sequence[EpisodeResult]) -> list[LambdaCurve]:
    """Per base profile run at several λ (``base@λ``), each strategy's success and cost
    against λ; a base run at one λ only is still a (one-point) curve."""
    by_base: dict[str, dict[float, str]] = {}
    for profile in dict.fromkeys(r.profile for r in rows):
        parsed = profile_lambda(profile)
        if parsed is not None:
            by_base.setdefault(parsed[0], {})[parsed[1]] = profile
    out: list[LambdaCurve] = []
    for base, profiles in by_base.items():
        lambdas = sorted(profiles)
        points: dict[str, dict[str, LambdaPoint]] = {}
        for lam in lambdas:
            mine = [r for r in rows if r.profile == profiles[lam]]
            for strategy in dict.fromkeys(r.strategy for r in mine):
                cell = [r for r in mine if r.strategy == strategy]
                ok = rate(sum(r.success for r in cell), len(cell))
                points.setdefault(strategy, {})[f"{lam:g}"] = LambdaPoint(
                    episodes=ok.n,
                    success=ok.value,
                    ci_low=ok.low,
                    ci_high=ok.high,
                    requests=mean([r.requests for r in cell]),
                    latency_s=mean([r.latency_s for r in cell]),
                )
        out.append(LambdaCurve(base=base, lambdas=lambdas, points=points))
    return out


def _bars(axes: Any, points: Sequence[tuple[float, float, float, float]], label: str) -> None:
    """One curve of (x, value, low, high) fractions, drawn in points with its interval."""
    axes.errorbar(
        [x for x, _, _, _ in points],
        [100 * v for _, v, _, _ in points],
        yerr=[
            [100 * (v - lo) for _, v, lo, _ in points],
            [100 * (hi - v) for _, v, _, hi in points],
        ],
        marker="o",
        markersize=3,
        capsize=2,
        label=label,
    )


def plot_lambda(
    curves: Sequence[LambdaCurve], pairs: Sequence[OnVsFrozen], path: Path
) -> Path | None:
    """``lambda.png``: per base profile, success (95 % bars) against λ per strategy, and
    the controller-on minus frozen difference (95 % bars) against λ. None without curves."""
    if not curves:
        return None
    from matplotlib.figure import Figure

    figure = Figure(figsize=(12, 4.5 * len(curves)), layout="constrained")
    axes = figure.subplots(len(curves), 2, squeeze=False)
    for (left, right), curve in zip(axes, curves, strict=True):
        names = list(curve.points)
        for i, name in enumerate(names):
            line = sorted((float(k), p) for k, p in curve.points[name].items())
            # A small sideways shift per strategy keeps equal curves visible.
            shift = (i - (len(names) - 1) / 2) * 0.004
            _bars(left, [(x + shift, p.success, p.ci_low, p.ci_high) for x, p in line], name)
        left.set_ylim(-3, 103)
        left.set_xlabel("onset rate λ (per request)")
        left.set_ylabel("success % (95 % Wilson interval)")
        left.set_title(f"profile {curve.base}@λ", fontsize=10)
        left.grid(alpha=0.3)
        left.legend(fontsize=7, loc="lower left")
        mine = [p for p in pairs if (profile_lambda(p.profile) or ("", 0.0))[0] == curve.base]
        for strategy in dict.fromkeys(p.strategy for p in mine):
            line2 = sorted(
                ((profile_lambda(p.profile) or ("", 0.0))[1], p)
                for p in mine
                if p.strategy == strategy
            )
            _bars(
                right,
                [(x, p.difference, p.ci_low, p.ci_high) for x, p in line2],
                f"{strategy} − {line2[0][1].frozen}",
            )
        right.axhline(0, color="black", linewidth=0.8)
        right.set_xlabel("onset rate λ (per request)")
        right.set_ylabel("success difference, points (95 % Newcombe interval)")
        right.set_title("controller on minus frozen", fontsize=10)
        right.grid(alpha=0.3)
        if mine:
            right.legend(fontsize=7, loc="lower left")
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png", dpi=110)
    return path
