"""What abstaining is worth, and how much of that is the sensor.

An abstaining strategy answers "no offered tool fits" when the first sample's confidence
is low. Its gain over the single call has two sources: the tasks where no tool fits (a
share of the workload, right for anyone who declines them) and the sensor's skill at
finding those tasks and the calls that would be wrong. This report separates them, per
model:

- ``always_abstain``: the tasks an answer with no call solves (declining every task);
- ``no_tool_fits_auroc``: how well a low first-sample p_low picks those tasks out;
- per abstaining row: how many tasks it declined, and ``random_same_rate``, the success
  expected if as many tasks were declined at random (exact: each task declined with the
  row's rate), so ``above_random`` is what the sensor adds;
- ``calibrated``: the same single call declined below a floor on p_low's isotonic
  calibration (fitted on the model's development bank), so a floor means the same
  probability of being right on every model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from closedloop.perception import IsotonicCalibration

from ._calibration import auroc
from ._replay import Abstaining, Record

__all__ = ["CALIBRATED_FLOORS", "abstention_report", "declining"]

CALIBRATED_FLOORS = (0.1, 0.2, 0.3, 0.4, 0.5)
"""Floors on the calibrated probability that the first call is right."""


def _p_low(record: Record) -> float:
    first = record.samples[0]
    return 0.0 if first.p_low is None else first.p_low


def declining(
    name: str,
    records: Sequence[Record],
    inner: Sequence[bool],
    declined: Sequence[bool],
) -> dict[str, Any]:
    """A rule that declines the tasks marked ``declined`` (and otherwise scores as
    ``inner``) against declining as many tasks at random: each task declined with the
    rule's rate, so the expectation is exact."""
    n = len(records)
    rate = sum(declined) / n
    success = sum(
        r.abstain_ok if d else ok for r, ok, d in zip(records, inner, declined, strict=True)
    )
    expected = sum(
        (1.0 - rate) * ok + rate * r.abstain_ok for r, ok in zip(records, inner, strict=True)
    )
    return {
        "name": name,
        "success": success,
        "declined": sum(declined),
        "random_same_rate": round(expected, 2),
        "above_random": round(success - expected, 2),
    }


def _model_report(
    records: Sequence[Record],
    rules: Sequence[Abstaining],
    fit: IsotonicCalibration | None,
) -> dict[str, Any]:
    lows = [_p_low(r) for r in records]
    fits = [r.abstain_ok for r in records]
    single = [r.samples[0].ok for r in records]
    rows = []
    for rule in rules:
        inner = [rule.inner.replay([r]).success for r in records]
        declined = [p < rule.below for p in lows]
        rows.append(declining(rule.name, records, inner, declined))
    out: dict[str, Any] = {
        "n": len(records),
        "always_abstain": sum(fits),
        "single": sum(single),
        "no_tool_fits_auroc": auroc([1.0 - p for p in lows], fits),
        "rows": rows,
    }
    if fit is not None:
        calibrated = [fit(p) for p in lows]
        out["calibrated"] = {
            "largest_calibrated_p": max(fit.values),
            "rows": [
                declining(
                    f"single+abstain[calibrated]<{f:g}",
                    records,
                    single,
                    [c < f for c in calibrated],
                )
                for f in CALIBRATED_FLOORS
            ],
        }
    return out


def abstention_report(
    banks: Sequence[Sequence[Record]],
    rules: Sequence[Abstaining],
    fits: Mapping[str, IsotonicCalibration],
) -> dict[str, Any]:
    """Per model: always declining, the sensor's AUROC for "no tool fits", each abstaining
    rule against declining at random at its rate, and floors on the calibrated scale."""
    out: dict[str, Any] = {
        "note": (
            "random_same_rate: the success expected if a rule's number of declined tasks "
            "were declined at random; above_random is the sensor's share of the gain. "
            "calibrated: p_low through the isotonic map fitted on the model's own "
            "development bank"
        )
    }
    for records in banks:
        if records:
            model = records[0].model
            out[model] = _model_report(records, rules, fits.get(model))
    return out
