"""The sensor study: a correct AUROC, and signals read from the simulated fleet."""

from __future__ import annotations

import pytest

from closedloop_bench.fleet._sensor import auroc, run_sensor


def test_auroc_ranks_ties_half_and_needs_both_classes() -> None:
    assert auroc([0.1, 0.2, 0.8, 0.9], [False, False, True, True]) == 1.0
    assert auroc([0.9, 0.8, 0.2, 0.1], [False, False, True, True]) == 0.0
    assert auroc([0.5, 0.5, 0.5], [True, False, False]) == 0.5
    # One positive above one negative, tied with the other: (1 + 0.5) / 2.
    assert auroc([0.3, 0.5, 0.5], [False, True, False]) == pytest.approx(0.75)
    assert auroc([0.1, 0.2], [False, False]) is None


def test_the_open_loop_delay_signal_predicts_the_step_s_refusals() -> None:
    report = run_sensor(seeds=(10,), schedules=("step",))
    fixed = report["schedules"]["step"]["fixed, no retries"]
    onset = fixed["onset_after_5s_quiet"]
    assert onset["positives"] >= 1 and onset["auroc"]["persistence"] == 0.5
    assert onset["auroc"]["delay_ratio"] > 0.8  # queueing delay leads the step's refusals
    # The frozen limit keeps the queue short: no refusal to predict, and the report says so.
    frozen = report["schedules"]["step"]["PID on delay frozen"]["429_next_1s"]
    assert frozen["positives"] == 0 and frozen["auroc"]["delay_ratio"] is None


def test_on_the_shedding_provider_the_open_loop_429s_come_well_after_the_onset() -> None:
    report = run_sensor(seeds=(10,), schedules=("shed",))
    arms = report["schedules"]["shed"]
    [lead] = arms["fixed, no retries"]["first_429_after_onset_s"]
    assert lead is not None and lead > 5.0  # the queue grows first
    assert arms["PID on delay frozen"]["first_429_after_onset_s"] == [None]  # no 429 at all
