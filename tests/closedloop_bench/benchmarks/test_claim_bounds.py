"""A claim's summary verdict never says more than its like-for-like rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from closedloop_bench.benchmarks._report import ClaimCheck
from closedloop_bench.benchmarks._verdicts import bounded_verdict

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    ("summary", "rows", "kept"),
    [
        ("confirmed (failures at least halved)", ["inconclusive (interval spans 0)"], False),
        ("refuted", ["not applicable (no estimator)", "inconclusive (interval spans 0)"], False),
        ("confirmed (x)", ["inconclusive (y)", "confirmed (failures at least halved)"], True),
        ("inconclusive (interval spans 60 %)", ["confirmed"], True),
        ("confirmed", [], True),
    ],
)
def test_a_definite_summary_needs_a_row_that_agrees(
    summary: str, rows: list[str], kept: bool
) -> None:
    bounded = bounded_verdict(summary, rows)
    assert (bounded == summary) is kept
    if not kept:
        assert bounded.startswith("inconclusive") and summary in bounded
    assert bounded_verdict(bounded, rows) == bounded  # bounding twice changes nothing


def test_every_committed_claim_reads_back_within_its_rows() -> None:
    report = json.loads((ROOT / "bench/results/faults/full/report.json").read_text())
    for raw in report["claims"]:
        claim = ClaimCheck.model_validate(raw)
        word = claim.verdict.split(" ", 1)[0]
        rows = [b.verdict.split(" ", 1)[0] for b in claim.baselines]
        assert word not in ("confirmed", "refuted", "qualified") or word in rows, claim.claim
