"""Calibration of the confidence sensors: AUROC and ECE as pure functions, and the reading
of one task's first proposal with a test model that sends logprobs."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest

from closedloop.models import FunctionModel, Message, RawCompletion
from closedloop.models._protocol import CallInfo
from closedloop_bench.tools._calibration import (
    auroc,
    calibration_report,
    ece,
    read_task,
    reliability,
)
from closedloop_bench.tools._format import load_tool_tasks
from closedloop_bench.tools._generate import DATA_DIR
from closedloop_bench.tools._oracle import ideal_reply


def test_auroc_ranks_right_above_wrong_and_counts_ties_half() -> None:
    assert auroc([0.9, 0.8, 0.2, 0.1], [True, True, False, False]) == 1.0
    assert auroc([0.1, 0.9], [True, False]) == 0.0
    assert auroc([0.5, 0.5], [True, False]) == 0.5
    assert auroc([0.3, 0.2], [True, True]) is None


def test_ece_is_the_bin_weighted_gap() -> None:
    # Bin [0.9, 1.0]: confidence 0.95, accuracy 1/2; bin [0.1, 0.2): 0.1 vs 0.
    probs, labels = [0.95, 0.95, 0.1, 0.1], [True, False, False, False]
    assert ece(probs, labels) == pytest.approx(0.5 * 0.45 + 0.5 * 0.1)
    assert ece([], []) is None
    assert [b["n"] for b in reliability(probs, labels)] == [2.0, 2.0]


def test_a_perfectly_calibrated_sensor_has_zero_ece() -> None:
    assert ece([1.0, 1.0, 0.0], [True, True, False]) == 0.0


async def test_read_task_judges_the_greedy_proposal_and_reads_every_sensor() -> None:
    task = load_tool_tasks(DATA_DIR / "dev.jsonl")[0]
    right = ideal_reply(task)

    def answer(_messages: Sequence[Message], call: CallInfo) -> RawCompletion:
        text = right if call.request.temperature == 0.0 else '{"calls": [], "reason": "no"}'
        pieces = [(ch, -0.5) for ch in text] if call.request.logprobs else []
        return RawCompletion(text=text, logprobs=tuple(pieces))

    reading = await read_task(task, FunctionModel(answer), k=3)
    assert reading.success
    assert reading.sensors["agreement"] == pytest.approx(1 / 3)
    assert reading.sensors["p_min"] == pytest.approx(math.exp(-0.5))
    report = calibration_report("test", [reading])
    assert report["overall"]["agreement"]["auroc"] is None  # one class only
    assert report["overall"]["n"] == 1
