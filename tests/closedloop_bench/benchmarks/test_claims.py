"""The claims judged like for like, on versus frozen, and the λ curve, from hand-built rows."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from closedloop_bench.benchmarks import EpisodeResult, FaultsConfig, FaultsReport, summarise_cells
from closedloop_bench.benchmarks._claims import (
    check_claims,
    frozen_counterpart,
    gain_verdict,
    on_vs_frozen,
    reproduce_command,
)
from closedloop_bench.benchmarks._lambda import lambda_curves, plot_lambda, profile_lambda
from closedloop_bench.benchmarks._report import render_faults
from closedloop_bench.benchmarks._stats import difference, wilson_interval

from .test_report import row as report_row


def row(strategy: str, steps: int, success: bool, **extra: object) -> EpisodeResult:
    """The report tests' episode, planned by the model: the frozen row is paired by planner."""
    return report_row(strategy, steps, success, **{"planner": "react", **extra})


def cell(strategy: str, steps: int, wins: int, n: int, **extra: object) -> list[EpisodeResult]:
    return [row(strategy, steps, k < wins, **extra) for k in range(n)]


# --- the difference interval --------------------------------------------------------------


def test_the_difference_interval_matches_newcombes_worked_example() -> None:
    # Newcombe (1998), Table II, 56/70 - 48/80 by the hybrid score method: 0.0524 to 0.3339.
    d = difference(56, 70, 48, 80)
    assert round(d.value, 4) == 0.2
    assert (round(d.low, 4), round(d.high, 4)) == (0.0524, 0.3339)
    assert not d.spans_zero
    assert difference(10, 10, 8, 10).spans_zero  # 100 % vs 80 % on 10 episodes: too few


@given(n1=st.integers(1, 60), n2=st.integers(1, 60), a=st.floats(0, 1), b=st.floats(0, 1))
def test_the_difference_interval_holds_the_estimate_inside_minus_one_to_one(
    n1: int, n2: int, a: float, b: float
) -> None:
    k1, k2 = round(a * n1), round(b * n2)
    d = difference(k1, n1, k2, n2)
    assert -1.0 <= d.low <= d.value <= d.high <= 1.0
    swapped = difference(k2, n2, k1, n1)
    assert swapped.low == pytest.approx(-d.high) and swapped.high == pytest.approx(-d.low)


# --- verdicts --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("treated", "baseline", "verdict"),
    [
        ((40, 40), (20, 40), "confirmed"),  # failures 50 % -> 0 %
        ((56, 80), (40, 80), "qualified"),  # failures 50 % -> 30 %: a gain, not halved
        ((20, 40), (36, 40), "refuted"),  # worse, interval below 0
        ((9, 10), (8, 10), "inconclusive"),  # spans 0
        ((10, 10), (10, 10), "not measurable"),  # the baseline never failed
    ],
)
def test_each_verdict_follows_from_the_interval(
    treated: tuple[int, int], baseline: tuple[int, int], verdict: str
) -> None:
    got = gain_verdict(difference(*treated, *baseline))
    assert got.startswith(verdict), (treated, baseline, got)


def pid_rows(frozen_wins: int = 10) -> list[EpisodeResult]:
    return [
        *cell("open_loop", 1, 12, 40),
        *cell("fixed_retries", 1, 38, 40),
        *cell("closedloop_pid", 1, 40, 40),
        *cell("closedloop_frozen", 1, frozen_wins, 40),
    ]


def test_the_pid_claim_is_judged_against_each_baseline_with_its_interval() -> None:
    rows = pid_rows()
    claims = check_claims(rows, summarise_cells(rows))
    (pid,) = [c for c in claims if c.claim.startswith("PID")]
    assert pid.verdict.startswith("confirmed")  # the article's framing is kept
    by = {b.baseline: b for b in pid.baselines}
    assert list(by) == ["open_loop", "fixed_retries", "closedloop_frozen"]
    assert by["open_loop"].verdict.startswith("confirmed")
    assert by["open_loop"].difference == pytest.approx(1.0 - 12 / 40)
    expected = difference(40, 40, 12, 40)
    assert (by["open_loop"].ci_low, by["open_loop"].ci_high) == (expected.low, expected.high)
    assert by["fixed_retries"].verdict.startswith("inconclusive")  # 40/40 vs 38/40
    assert by["closedloop_frozen"].verdict.startswith("confirmed")
    assert by["closedloop_frozen"].baseline_success == pytest.approx(0.25)
    assert by["closedloop_frozen"].role.startswith("same loop, controller frozen")
    assert "--strategies open_loop,fixed_retries,closedloop_pid,closedloop_frozen" in pid.command
    assert "--steps 1 " in pid.command


def test_a_baseline_the_run_lacks_is_said_not_run() -> None:
    rows = [r for r in pid_rows() if r.strategy != "closedloop_frozen"]
    (pid,) = [c for c in check_claims(rows, summarise_cells(rows)) if c.claim.startswith("PID")]
    frozen = pid.baselines[-1]
    assert frozen.baseline == "closedloop_frozen" and frozen.verdict == "not run"
    assert "--strategies" in frozen.note and frozen.difference is None


def test_the_adrc_claim_reads_multi_step_tasks_and_the_60_percent_claim_each_baseline() -> None:
    rows = [
        *cell("open_loop", 7, 4, 20),  # 20 %: below 60 % for sure
        *cell("fixed_retries", 7, 19, 20),  # 95 %: above 60 % for sure
        *cell("closedloop_frozen", 7, 12, 20),  # 60 %: the interval spans it
        *cell("closedloop_adrc", 7, 20, 20),
    ]
    claims = {c.claim[:12]: c for c in check_claims(rows, summarise_cells(rows))}
    below = {b.baseline: b.verdict for b in claims["uncontrolled"].baselines}
    assert below["open_loop"].startswith("confirmed")
    assert below["fixed_retries"].startswith("refuted")
    assert below["closedloop_frozen"].startswith("inconclusive")
    adrc = {b.baseline: b for b in claims["ADRC on mult"].baselines}
    assert adrc["fixed_retries"].verdict.startswith("inconclusive")
    assert adrc["closedloop_frozen"].verdict.startswith("confirmed")
    assert adrc["closedloop_frozen"].cell == "tasks of 5-10 steps"


def test_the_eso_claim_compares_its_warning_on_failures_with_it_on_successes() -> None:
    warned_failures = [row("closedloop_adrc", 5, False, warned_early=k < 9) for k in range(10)]
    quiet_wins = [row("closedloop_adrc", 5, True, warned_early=k < 1) for k in range(20)]
    rows = [*warned_failures, *quiet_wins]
    (eso,) = check_claims(rows, summarise_cells(rows))
    assert eso.verdict == "confirmed" and eso.measured.startswith("9/10")
    *absent, own = eso.baselines
    assert all(b.verdict.startswith("not applicable") for b in absent) and len(absent) == 3
    assert own.baseline == "closedloop_adrc successes" and own.verdict == "confirmed"
    assert own.difference == pytest.approx(0.9 - 0.05)
    noisy = [*warned_failures, *(row("closedloop_adrc", 5, True, warned_early=True),) * 20]
    (eso,) = check_claims(noisy, summarise_cells(noisy))
    assert eso.baselines[-1].verdict.startswith("inconclusive")  # it warns on wins too


def test_the_command_reruns_the_same_episodes() -> None:
    config = FaultsConfig(model="test:oracle", episodes=4, seed=7, latency_scale=0.05)
    text = reproduce_command(config, "regimes@0.2", ["open_loop", "closedloop_pid"], [3, 1, 3])
    assert text.startswith("closedloop bench faults --model test:oracle --profiles regimes@0.2")
    for part in ("--steps 1,3", "--episodes 4", "--seed 7", "--latency-scale 0.05"):
        assert part in text
    assert "--no-frontier --no-warnings" in text


# --- on versus frozen ----------------------------------------------------------------------


def test_the_frozen_counterpart_needs_the_same_planner() -> None:
    rows = [row("closedloop_pid", 1, True, planner="reference"), row("closedloop_frozen", 1, True)]
    assert frozen_counterpart("closedloop_pid", rows) is None  # rules vs model: not like for like
    rows.append(row("closedloop_frozen", 1, True, planner="reference", profile="x"))
    assert frozen_counterpart("closedloop_pid", rows) is None  # mixed planners still differ
    same = [row("closedloop_pid", 1, True), row("closedloop_model_fixed", 1, True)]
    assert frozen_counterpart("closedloop_pid", same) == "closedloop_model_fixed"
    assert frozen_counterpart("closedloop_model_fixed", same) is None  # frozen has none
    assert frozen_counterpart("fixed_retries", same) is None


def test_on_vs_frozen_reports_success_and_cost_differences_per_profile() -> None:
    rows = [
        *cell("closedloop_pid", 3, 9, 10, requests=5, latency_s=2.0),
        *cell("closedloop_frozen", 3, 5, 10, requests=7, latency_s=3.0),
        *cell("closedloop_pid", 3, 4, 10, requests=4, profile="regimes@0.2"),
        *cell("closedloop_frozen", 3, 4, 10, requests=4, profile="regimes@0.2"),
        *cell("open_loop", 3, 1, 10),
    ]
    pairs = {(p.profile, p.strategy): p for p in on_vs_frozen(rows)}
    assert set(pairs) == {("seed000", "closedloop_pid"), ("regimes@0.2", "closedloop_pid")}
    seed = pairs[("seed000", "closedloop_pid")]
    assert seed.frozen == "closedloop_frozen" and seed.difference == pytest.approx(0.4)
    expected = difference(9, 10, 5, 10)
    assert (seed.ci_low, seed.ci_high) == (expected.low, expected.high)
    assert seed.requests_difference == pytest.approx(-2.0)
    assert seed.latency_difference_s == pytest.approx(-1.0)
    assert pairs[("regimes@0.2", "closedloop_pid")].difference == 0.0


# --- the λ curve ------------------------------------------------------------------------------


def test_profile_lambda_reads_name_at_rate() -> None:
    assert profile_lambda("regimes@0.2") == ("regimes", 0.2)
    assert profile_lambda("seed000") is None and profile_lambda("a@b") is None


def test_the_lambda_curve_holds_success_interval_and_cost_per_strategy(tmp_path: Path) -> None:
    rows = [
        *cell("closedloop_pid", 3, 10, 10, profile="regimes@0", requests=3),
        *cell("closedloop_pid", 3, 6, 10, profile="regimes@0.3", requests=6, latency_s=2.5),
        *cell("closedloop_frozen", 3, 3, 10, profile="regimes@0.3"),
        *cell("open_loop", 3, 5, 10),  # no λ: not on the curve
    ]
    (curve,) = lambda_curves(rows)
    assert curve.base == "regimes" and curve.lambdas == [0.0, 0.3]
    assert set(curve.points) == {"closedloop_pid", "closedloop_frozen"}
    point = curve.points["closedloop_pid"]["0.3"]
    assert (point.success, point.requests, point.latency_s) == (0.6, 6.0, 2.5)
    assert (point.ci_low, point.ci_high) == wilson_interval(6, 10)
    assert "0" in curve.points["closedloop_pid"] and "0" not in curve.points["closedloop_frozen"]
    png = plot_lambda([curve], on_vs_frozen(rows), tmp_path / "lambda.png")
    assert png is not None and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert plot_lambda([], [], tmp_path / "none.png") is None


def test_the_tables_show_the_claims_the_pairs_and_the_curve() -> None:
    rows = [*pid_rows(), *cell("closedloop_pid", 1, 5, 10, profile="regimes@0.1")]
    rows += cell("closedloop_frozen", 1, 2, 10, profile="regimes@0.1")
    cells = summarise_cells(rows)
    report = FaultsReport(
        command="closedloop bench faults",
        config={},
        model={"spec": "test:oracle"},
        wall_s=1.0,
        episodes=rows,
        cells=cells,
        claims=check_claims(rows, cells),
        on_vs_frozen=on_vs_frozen(rows),
        lambda_curves=lambda_curves(rows),
    )
    console = Console(record=True, width=250)
    render_faults(report, console)
    text = console.export_text()
    for needle in (
        "judged like for like",
        "vs closedloop_frozen",
        "rerun claim 1: closedloop bench faults --model test:oracle",
        "controller on vs frozen",
        "against λ (regimes@λ)",
        "λ = 0.1",
    ):
        assert needle in text, needle
    assert FaultsReport.model_validate_json(report.model_dump_json()) == report
