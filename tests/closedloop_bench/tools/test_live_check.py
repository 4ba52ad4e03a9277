"""The live check on a test model: the real strategies run live, the replay from a bank
recorded from the same model, and the report says whether live lies inside the replay."""

from __future__ import annotations

import asyncio
import gzip
import json
from pathlib import Path

from closedloop_bench.tools._bank import record_task
from closedloop_bench.tools._command import interleave
from closedloop_bench.tools._generate import DATA_DIR
from closedloop_bench.tools._models import resolve_models
from closedloop_bench.tools._replay_command import _tasks_by_id

from .conftest import BenchScript

TASKS = (DATA_DIR / "eval.jsonl").resolve()


def _record(path: Path, spec: str, limit: int) -> Path:
    provider = resolve_models([spec])[0]
    tasks = interleave(list(_tasks_by_id(TASKS).values()))[:limit]
    header = {
        "kind": "header",
        "model": spec,
        "split": "eval",
        "k": 3,
        "temperature": 0.7,
        "max_tokens": 320,
        "prompt": "strict",
        "threads": 1,
        "command": "test",
    }
    rows = [
        asyncio.run(record_task(t, provider.for_task(t), k=3, temperature=0.7, max_tokens=320))
        for t in tasks
    ]
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        for row in (header, *rows):
            handle.write(json.dumps(row) + "\n")
    return path


def test_the_live_check_on_the_oracle_matches_its_replay(
    tmp_path: Path, bench_script: BenchScript
) -> None:
    bank = _record(tmp_path / "oracle.jsonl.gz", "test:oracle", 6)
    out = tmp_path / "live.json"
    argv = ["--model", "test:oracle", "--limit", "6", "--bank", str(bank), "--out", str(out)]
    assert bench_script("tools_live_check").main(argv) == 0
    report = json.loads(out.read_text())
    assert report["n"] == 6 and report["command"].endswith("--out " + str(out))
    strict = report["strategies"]["strict"]
    assert strict["live"]["success"] == strict["replay"]["success"] == 6
    assert strict["success_inside"] is True
    assert strict["per_task_agreement"]["only_a"] == strict["per_task_agreement"]["only_b"] == 0
    votes = report["strategies"]["svotes@3"]
    assert votes["live"]["mean_calls"] == 3.0
    # The live vote is the bank's vote: the same decisions on every task.
    assert votes["live"]["success"] == votes["replay"]["success"] == 6
    assert votes["per_task_agreement"]["only_a"] == votes["per_task_agreement"]["only_b"] == 0


def test_the_live_check_refuses_a_bank_without_the_tasks(
    tmp_path: Path, bench_script: BenchScript
) -> None:
    bank = _record(tmp_path / "no-call.jsonl.gz", "test:no-call", 2)
    argv = ["--model", "test:no-call", "--limit", "4", "--bank", str(bank)]
    assert bench_script("tools_live_check").main([*argv, "--out", str(tmp_path / "x.json")]) == 2
    assert not (tmp_path / "x.json").exists()
