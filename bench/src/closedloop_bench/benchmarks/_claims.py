"""The published claims judged like for like, and the controller against its frozen self.

The PID/ADRC article compares its controlled agent with an agent that has no retries at
all. That framing is kept (``open_loop``), and every claim is also read against the two
baselines that isolate what control adds:

* ``fixed_retries``: tenacity with the same retry predicate and attempt budget, so the
  difference is not merely "retrying at all";
* the frozen counterpart: the same loop with every actuator held at u = 0.5 and the
  protocols off (``closedloop_frozen`` for ``closedloop_pid`` and ``closedloop_adrc``,
  ``closedloop_model_fixed`` for the rows where the model plans every step), so the
  difference is the feedback alone.

Each comparison is the difference in success on the same episodes with Newcombe's hybrid
score interval (Newcombe 1998); a verdict follows from the interval, never from the point
estimates alone. The same pairing, per profile, is the report's ``on_vs_frozen`` section
(``_lambda`` draws it against the onset rate λ of profiles ``NAME@λ``).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from ._report import (
    CellSummary,
    ClaimBaseline,
    ClaimCheck,
    EpisodeResult,
    OnVsFrozen,
)
from ._runner import FaultsConfig
from ._stats import Difference, difference, rate

__all__ = [
    "FROZEN_COUNTERPART",
    "check_claims",
    "frozen_counterpart",
    "gain_verdict",
    "mean",
    "on_vs_frozen",
    "reproduce_command",
]

FROZEN_COUNTERPART = {
    "closedloop_pid": "closedloop_frozen",
    "closedloop_adrc": "closedloop_frozen",
    "closedloop_model_pid": "closedloop_model_fixed",
    "closedloop_model_gate": "closedloop_model_fixed",
    "closedloop_budget": "closedloop_model_fixed",
}
"""The frozen row each controller-on row is read against (same planner and budget)."""

FROZEN = frozenset(FROZEN_COUNTERPART.values())

DIFFERS = {
    "closedloop_adrc": "also the ESO's protocols",
    "closedloop_model_gate": "also the confidence gate",
    "closedloop_budget": "also the retry schedule from u, the breaker and the gate",
}
"""What a controller-on row changes besides the feedback, when it changes more."""

ROLES = {
    "open_loop": "no retries (the article's framing)",
    "fixed_retries": "tenacity, same retry predicate and budget",
    "frozen": "same loop, controller frozen at u = 0.5, protocols off",
}

THRESHOLD_AT_7 = 0.60
"""The article's "below 60 % success by step 7"."""


def _planners(rows: Sequence[EpisodeResult], strategy: str) -> set[str]:
    return {r.planner for r in rows if r.strategy == strategy}


def frozen_counterpart(strategy: str, rows: Sequence[EpisodeResult]) -> str | None:
    """The frozen row of ``rows`` that ``strategy`` is read against, or None.

    The mapped one (:data:`FROZEN_COUNTERPART`) first, then the other frozen row; a
    candidate counts only when its episodes ran on the same planner as ``strategy``'s
    (a rules-planned loop is never read against a model-planned one). A closedloop row
    this module does not know is read against whichever frozen row matches its planner.
    """
    if strategy in FROZEN or not strategy.startswith("closedloop"):
        return None
    mine = _planners(rows, strategy)
    if not mine:
        return None
    first = FROZEN_COUNTERPART.get(strategy, "closedloop_model_fixed")
    for candidate in (first, *sorted(FROZEN - {first})):
        if _planners(rows, candidate) == mine:
            return candidate
    return None


def reproduce_command(
    config: FaultsConfig | None, profile: str, strategies: Sequence[str], steps: Sequence[int]
) -> str:
    """The ``closedloop bench faults`` command that reruns one comparison alone."""
    parts = ["closedloop bench faults"]
    model = "test:oracle" if config is None else config.model
    parts += ["--model", model, "--profiles", profile]
    parts += ["--steps", ",".join(str(s) for s in sorted(set(steps)))]
    parts += ["--strategies", ",".join(dict.fromkeys(strategies))]
    if config is not None:
        if config.episodes is not None:
            parts += ["--episodes", str(config.episodes)]
        if config.seed:
            parts += ["--seed", str(config.seed)]
        if config.latency_scale != 1.0:
            parts += ["--latency-scale", f"{config.latency_scale:g}"]
        if config.attempts != 3:
            parts += ["--attempts", str(config.attempts)]
        if config.closed_loop != "auto":
            parts += ["--closed-loop", config.closed_loop]
        if config.split != "eval":
            parts += ["--split", config.split]
        if config.tasks is not None:
            parts += ["--tasks", str(config.tasks)]
    parts += ["--no-frontier", "--no-warnings"]
    return " ".join(parts)


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def _reduction(before: float, after: float) -> str:
    """The article's framing: point estimates of the failure rate, before and after."""
    if before <= 0.0:
        return "not measurable (no failures without control)"
    if after >= before:
        return "refuted (no reduction)"
    if after <= before / 2:
        return "confirmed (failures at least halved)"
    return "qualified (smaller reduction)"


def _baselines(treated: str, rows: Sequence[EpisodeResult]) -> list[tuple[str, str]]:
    """(baseline strategy, role) for the three comparisons; the frozen one may be absent
    from the run (then its name is the one the run should have had)."""
    frozen = frozen_counterpart(treated, rows) or FROZEN_COUNTERPART.get(
        treated, "closedloop_frozen"
    )
    return [
        ("open_loop", ROLES["open_loop"]),
        ("fixed_retries", ROLES["fixed_retries"]),
        (frozen, ROLES["frozen"]),
    ]


def _not_run(baseline: str, role: str, treated: str, cell: str) -> ClaimBaseline:
    return ClaimBaseline(
        baseline=baseline,
        role=role,
        treated=treated,
        cell=cell,
        verdict="not run",
        note=f"add {baseline} to --strategies",
    )


def gain_verdict(d: Difference) -> str:
    """A reduction claim's verdict from the difference in success and its interval."""
    before, after = 1 - d.baseline.value, 1 - d.treated.value
    if before <= 0.0:
        verdict = "not measurable (no failures in the baseline)"
    elif d.spans_zero:
        verdict = "inconclusive (interval spans 0)"
    elif d.high < 0.0:
        verdict = "refuted (the controlled loop does worse)"
    elif after <= before / 2:
        verdict = "confirmed (failures at least halved)"
    else:
        verdict = "qualified (a smaller reduction than published)"
    return verdict


def _compare(
    treated: str, cell: str, rows: Sequence[EpisodeResult], verdict_of: str = "gain"
) -> list[ClaimBaseline]:
    """``treated`` against each baseline on ``rows`` (already one cell of one profile)."""
    mine = [r for r in rows if r.strategy == treated]
    out: list[ClaimBaseline] = []
    for baseline, role in _baselines(treated, rows):
        base = [r for r in rows if r.strategy == baseline]
        if not base or not mine:
            out.append(_not_run(baseline if not base else treated, role, treated, cell))
            continue
        b = rate(sum(r.success for r in base), len(base))
        d = difference(sum(r.success for r in mine), len(mine), b.k, b.n)
        if verdict_of == "gain":
            verdict = gain_verdict(d)
        elif b.high < THRESHOLD_AT_7:
            verdict = "confirmed (the baseline's interval lies below 60 %)"
        elif b.low >= THRESHOLD_AT_7:
            verdict = "refuted (the baseline's interval lies at or above 60 %)"
        else:
            verdict = "inconclusive (the baseline's interval spans 60 %)"
        out.append(
            ClaimBaseline(
                baseline=baseline,
                role=role,
                treated=treated,
                cell=cell,
                treated_success=d.treated.value,
                treated_episodes=d.treated.n,
                baseline_success=b.value,
                baseline_ci_low=b.low,
                baseline_ci_high=b.high,
                baseline_episodes=b.n,
                difference=d.value,
                ci_low=d.low,
                ci_high=d.high,
                verdict=verdict,
            )
        )
    return out


def _eso_baselines(rows: Sequence[EpisodeResult]) -> list[ClaimBaseline]:
    """The warning on failures against the same warning on successes; the baselines
    have no estimator to compare."""
    adrc = [r for r in rows if r.strategy == "closedloop_adrc"]
    failed = [r for r in adrc if not r.success]
    won = [r for r in adrc if r.success]
    out = [
        ClaimBaseline(
            baseline=name,
            role=role,
            treated="closedloop_adrc",
            cell="failed episodes",
            verdict="not applicable (no estimator in this baseline)",
        )
        for name, role in _baselines("closedloop_adrc", rows)
    ]
    if failed and won:
        d = difference(
            sum(r.warned_early for r in failed),
            len(failed),
            sum(r.warned_early for r in won),
            len(won),
        )
        if d.spans_zero:
            verdict = "inconclusive (interval spans 0)"
        elif d.high < 0.0:
            verdict = "refuted (it warns more often on successes)"
        elif d.treated.value >= 0.7:
            verdict = "confirmed"
        else:
            verdict = "qualified (it warns ahead of fewer failures)"
        out.append(
            ClaimBaseline(
                baseline="closedloop_adrc successes",
                role="the same warning on episodes that succeeded: one that fires as often "
                "there predicts nothing",
                treated="closedloop_adrc",
                cell="warned share, failures vs successes",
                treated_success=d.treated.value,
                treated_episodes=d.treated.n,
                baseline_success=d.baseline.value,
                baseline_ci_low=d.baseline.low,
                baseline_ci_high=d.baseline.high,
                baseline_episodes=d.baseline.n,
                difference=d.value,
                ci_low=d.low,
                ci_high=d.high,
                verdict=verdict,
                note="shares warned early, not success; the early-warning study "
                "(early_warning.json) scores the estimator on regime onsets",
            )
        )
    return out


def _cell(cells: Sequence[CellSummary], profile: str, name: str, steps: int) -> CellSummary | None:
    return next(
        (c for c in cells if c.profile == profile and c.strategy == name and c.steps == steps),
        None,
    )


def check_claims(
    rows: Sequence[EpisodeResult],
    cells: Sequence[CellSummary],
    profile: str = "seed000",
    *,
    config: FaultsConfig | None = None,
) -> list[ClaimCheck]:
    """The published numbers next to this run's under ``profile``: the article's verdict
    (point estimates against the open loop), and each claim judged like for like against
    the open loop, tenacity on the same predicate and the frozen controller (``config``
    makes each claim's command rerun the same episodes)."""
    rows = [r for r in rows if r.profile == profile]
    out: list[ClaimCheck] = []

    def command(treated: str, steps: Sequence[int]) -> str:
        names = ["open_loop", "fixed_retries", treated]
        names += [b for b, _ in _baselines(treated, rows)[2:]]
        return reproduce_command(config, profile, names, steps)

    open7 = _cell(cells, profile, "open_loop", 7)
    if open7 is not None:
        below = open7.ci_high < THRESHOLD_AT_7
        at7 = [r for r in rows if r.steps == 7]
        out.append(
            ClaimCheck(
                claim="uncontrolled agents fall below 60 % success by step 7 (PID/ADRC article)",
                seed_value="< 60 %",
                measured=f"open loop at 7 steps: {_pct(open7.success)} "
                f"[{_pct(open7.ci_low)}, {_pct(open7.ci_high)}], n={open7.episodes}",
                verdict="confirmed"
                if below
                else ("refuted" if open7.ci_low >= 0.60 else "inconclusive (interval spans 60 %)"),
                baselines=_compare("closedloop_adrc", "7-step tasks", at7, verdict_of="below"),
                command=command("closedloop_adrc", [7]),
            )
        )
    one_open = _cell(cells, profile, "open_loop", 1)
    one_pid = _cell(cells, profile, "closedloop_pid", 1)
    if one_open is not None and one_pid is not None:
        before, after = 1 - one_open.success, 1 - one_pid.success
        out.append(
            ClaimCheck(
                claim="PID on a single tool call: failure 12.7 % -> 3.2 % (PID/ADRC article)",
                seed_value="12.7 % -> 3.2 %",
                measured=f"1-step tasks: open loop {_pct(before)} -> PID {_pct(after)}",
                verdict=_reduction(before, after),
                baselines=_compare(
                    "closedloop_pid", "1-step tasks", [r for r in rows if r.steps == 1]
                ),
                command=command("closedloop_pid", [1]),
            )
        )
    multi = [r for r in rows if r.steps >= 5]
    plain = [r for r in multi if r.strategy == "open_loop"]
    adrc = [r for r in multi if r.strategy == "closedloop_adrc"]
    if plain and adrc:
        a = rate(sum(r.success for r in plain), len(plain)).value
        b = rate(sum(r.success for r in adrc), len(adrc)).value
        out.append(
            ClaimCheck(
                claim="ADRC on multi-step tasks: success 61.3 % -> 89.7 % (PID/ADRC article)",
                seed_value="61.3 % -> 89.7 %",
                measured=f"tasks of 5-10 steps: open loop {_pct(a)} -> PID+ADRC {_pct(b)}",
                verdict=_reduction(1 - a, 1 - b),
                baselines=_compare("closedloop_adrc", "tasks of 5-10 steps", multi),
                command=command("closedloop_adrc", sorted({r.steps for r in multi})),
            )
        )
    failures = [r for r in rows if r.strategy == "closedloop_adrc" and not r.success]
    if failures:
        warned = sum(r.warned_early for r in failures)
        share = rate(warned, len(failures))
        verdict = (
            "confirmed"
            if share.value >= 0.7
            else ("qualified" if share.value >= 0.3 else "refuted")
        )
        out.append(
            ClaimCheck(
                claim="the ESO flags 83 % of failures ahead (PID/ADRC article)",
                seed_value="83 %",
                measured=f"{warned}/{len(failures)} PID+ADRC failures ({_pct(share.value)}, "
                f"95 % [{_pct(share.low)}, {_pct(share.high)}]) had left the normal "
                "protocol before their last step",
                verdict=verdict,
                baselines=_eso_baselines(rows),
                command=reproduce_command(
                    config, profile, ["closedloop_adrc"], sorted({r.steps for r in rows})
                ),
            )
        )
    return out


def mean(values: Sequence[float]) -> float:
    """The mean of ``values`` (0 for none)."""
    return statistics.fmean(values) if values else 0.0


def on_vs_frozen(rows: Sequence[EpisodeResult]) -> list[OnVsFrozen]:
    """Every controller-on row of every profile against its frozen counterpart (see
    :func:`frozen_counterpart`), over all step counts of that profile."""
    out: list[OnVsFrozen] = []
    for profile in dict.fromkeys(r.profile for r in rows):
        mine = [r for r in rows if r.profile == profile]
        for strategy in dict.fromkeys(r.strategy for r in mine):
            frozen = frozen_counterpart(strategy, mine)
            if frozen is None:
                continue
            on = [r for r in mine if r.strategy == strategy]
            off = [r for r in mine if r.strategy == frozen]
            d = difference(
                sum(r.success for r in on), len(on), sum(r.success for r in off), len(off)
            )
            requests = mean([r.requests for r in on]), mean([r.requests for r in off])
            latency = mean([r.latency_s for r in on]), mean([r.latency_s for r in off])
            out.append(
                OnVsFrozen(
                    profile=profile,
                    strategy=strategy,
                    frozen=frozen,
                    differs=DIFFERS.get(strategy, ""),
                    episodes=len(on),
                    frozen_episodes=len(off),
                    success=d.treated.value,
                    frozen_success=d.baseline.value,
                    difference=d.value,
                    ci_low=d.low,
                    ci_high=d.high,
                    requests=requests[0],
                    frozen_requests=requests[1],
                    requests_difference=requests[0] - requests[1],
                    latency_s=latency[0],
                    frozen_latency_s=latency[1],
                    latency_difference_s=latency[0] - latency[1],
                )
            )
    return out
