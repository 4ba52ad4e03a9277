"""The abstention report: declining at a floor against declining at random, by hand."""

from __future__ import annotations

import pytest

from closedloop.perception import IsotonicCalibration
from closedloop_bench.tools._abstention import abstention_report
from closedloop_bench.tools._replay import Abstaining, Record, Sample, Votes


def _task(i: int, p: float, ok: bool, fits: bool) -> Record:
    sample = Sample(0, "k" if not fits else None, ok, p, p, p, 10, 1.0)
    return Record(f"t{i}", "irrelevance" if fits else "single", "m", (sample,), abstain_ok=fits)


# Four tasks: two where no tool fits (both read low), a right call read high, a wrong
# call read low. The single call solves one; declining below 0.5 solves three.
TASKS = [
    _task(0, 0.1, False, True),
    _task(1, 0.2, False, True),
    _task(2, 0.9, True, False),
    _task(3, 0.3, False, False),
]


def test_a_floor_is_judged_against_declining_as_many_tasks_at_random() -> None:
    report = abstention_report([TASKS], [Abstaining(Votes(1), 0.5)], {})
    model = report["m"]
    assert (model["n"], model["always_abstain"], model["single"]) == (4, 2, 1)
    # Low readings pick out both tasks where no tool fits, against one that does not.
    assert model["no_tool_fits_auroc"] == pytest.approx(1.0)
    (row,) = model["rows"]
    assert (row["success"], row["declined"]) == (3, 3)
    # Declining 3 of 4 at random: each task declined with rate 3/4, so the right call
    # survives a quarter of the time and each no-tool task is declined 3/4 of the time.
    assert row["random_same_rate"] == pytest.approx(0.25 * 1 + 0.75 * 2)
    assert row["above_random"] == pytest.approx(3 - 1.75)
    assert "calibrated" not in model


def test_calibrated_floors_read_the_model_s_own_map() -> None:
    # The map says: below 0.5 a call is never right, above it always.
    fit = IsotonicCalibration(edges=(0.5, 1.0), values=(0.0, 1.0))
    report = abstention_report([TASKS, []], [], {"m": fit})
    calibrated = report["m"]["calibrated"]
    assert calibrated["largest_calibrated_p"] == 1.0
    assert {r["declined"] for r in calibrated["rows"]} == {3}
    assert {r["success"] for r in calibrated["rows"]} == {3}
    assert set(report) == {"note", "m"}  # an empty bank adds no model
