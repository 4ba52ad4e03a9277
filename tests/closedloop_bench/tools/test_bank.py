"""The sample bank: k samples per task recorded with their verdict and cost, resumed
after the last finished task, a damaged tail dropped, other settings refused."""

from __future__ import annotations

import gzip
import itertools
from collections.abc import Sequence
from pathlib import Path

import pytest

from closedloop.models import FunctionModel, Message, RawCompletion
from closedloop.models._protocol import CallInfo
from closedloop_bench.tools._bank import BankMismatchError, read_bank, record_bank
from closedloop_bench.tools._format import load_tool_tasks
from closedloop_bench.tools._generate import DATA_DIR
from closedloop_bench.tools._oracle import ideal_reply

HEADER = {
    "model": "test",
    "split": "dev",
    "k": 3,
    "temperature": 0.7,
    "max_tokens": 64,
    "prompt": "strict",
}


def _model(calls: list[int]) -> FunctionModel:
    tasks = {t.id: t for t in load_tool_tasks(DATA_DIR / "dev.jsonl")}

    def answer(messages: Sequence[Message], call: CallInfo) -> RawCompletion:
        calls.append(1)
        task = next(t for t in tasks.values() if t.messages[-1].content == messages[-1].content)
        greedy = call.request.temperature == 0.0
        text = ideal_reply(task) if greedy else '{"no_call": "none fits"}'
        return RawCompletion(text=text, logprobs=tuple((ch, -0.25) for ch in text))

    return FunctionModel(answer)


def _ticks() -> itertools.count[float]:
    return itertools.count(0.0, 0.5)


async def test_each_sample_keeps_its_verdict_sensors_and_cost(tmp_path: Path) -> None:
    tasks = load_tool_tasks(DATA_DIR / "dev.jsonl")[:2]
    path = tmp_path / "bank.jsonl.gz"
    calls: list[int] = []
    ticks = _ticks()
    count = await record_bank(path, tasks, _model(calls), HEADER, clock=lambda: next(ticks))
    header, rows = read_bank(path)
    assert count == 2 and header["k"] == 3 and len(calls) == 6
    first = rows[0]["samples"]
    assert [s["temperature"] for s in first] == [0.0, 0.7, 0.7]
    assert first[0]["success"] and first[0]["key"] is not None
    assert first[0]["logprob_min"] == pytest.approx(-0.25)
    assert first[0]["seconds"] == pytest.approx(0.5)
    assert first[1]["key"] != first[0]["key"]


async def test_a_stopped_recording_resumes_after_its_last_task(tmp_path: Path) -> None:
    tasks = load_tool_tasks(DATA_DIR / "dev.jsonl")[:3]
    path = tmp_path / "bank.jsonl.gz"
    calls: list[int] = []
    await record_bank(path, tasks[:1], _model(calls), HEADER)
    # A kill mid-write leaves a partial gzip member at the end.
    with path.open("ab") as handle:
        handle.write(gzip.compress(b'{"kind": "task", "task_id": "x"')[:-6])
    assert [r["task_id"] for r in read_bank(path)[1]] == [tasks[0].id]
    count = await record_bank(path, tasks, _model(calls), HEADER)
    assert count == 3 and len(calls) == 9
    assert [r["task_id"] for r in read_bank(path)[1]] == [t.id for t in tasks]


async def test_a_bank_of_other_settings_is_refused_not_mixed(tmp_path: Path) -> None:
    tasks = load_tool_tasks(DATA_DIR / "dev.jsonl")[:1]
    path = tmp_path / "bank.jsonl.gz"
    await record_bank(path, tasks, _model([]), HEADER)
    with pytest.raises(BankMismatchError, match="k"):
        await record_bank(path, tasks, _model([]), {**HEADER, "k": 5})
    assert read_bank(tmp_path / "missing.jsonl.gz") == ({}, [])
