"""The report: its JSON schema, the summaries it holds, the targets, the claims, the PNG."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console

from closedloop_bench.benchmarks import (
    REPORT_SCHEMA_VERSION,
    STRATEGY_NAMES,
    EpisodeResult,
    FaultsReport,
    check_claims,
    check_targets,
    render_faults,
    run_faults_bench,
    summarise_cells,
)

from .conftest import FakeSleep, tiny

EPISODE_KEYS = {
    "strategy", "profile", "steps", "task_id", "domain", "template", "impossible",
    "repetition", "fault_seed", "success", "reason", "halt", "loop_steps", "handed_over",
    "handover_justified", "oracle_solvable", "model_calls", "prompt_tokens",
    "completion_tokens", "latency_s", "wall_s", "requests", "faults", "duplicate_effects",
    "warned_early", "regime_changes", "planner", "error",
}  # fmt: skip


async def test_the_json_report_has_the_documented_shape(tmp_path: Path, sleep: FakeSleep) -> None:
    out = tmp_path / "bench"
    report = await run_faults_bench(tiny(out=out), sleep=sleep)
    data = json.loads((out / "report.json").read_text())
    assert data["schema_version"] == REPORT_SCHEMA_VERSION == 1
    assert set(data) == {
        "schema_version", "command", "config", "model", "wall_s", "episodes", "cells",
        "targets", "claims", "on_vs_frozen", "lambda_curves", "notes",
    }  # fmt: skip
    assert data["model"]["spec"] == "test:oracle" and data["model"]["deterministic"] is True
    assert data["config"]["steps"] == [1, 2] and data["config"]["episodes"] == 2
    assert all(set(e) == EPISODE_KEYS for e in data["episodes"])
    assert FaultsReport.model_validate(data).model_dump(mode="json") == report.model_dump(
        mode="json"
    )
    overall = [c for c in data["cells"] if c["steps"] == 0]
    assert len(overall) == len(STRATEGY_NAMES) and all(c["episodes"] == 4 for c in overall)
    assert all(0.0 <= c["ci_low"] <= c["success"] <= c["ci_high"] <= 1.0 for c in data["cells"])
    assert (out / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def row(strategy: str, steps: int, success: bool, **extra: object) -> EpisodeResult:
    values: dict[str, object] = {
        "strategy": strategy, "profile": "seed000", "steps": steps, "task_id": f"t{steps}",
        "domain": "weather", "template": "x", "impossible": False, "repetition": 0,
        "fault_seed": 1, "success": success, "reason": "", "halt": "final", "loop_steps": steps,
        "handed_over": False, "oracle_solvable": True, "model_calls": steps + 1,
        "prompt_tokens": 10, "completion_tokens": 5, "latency_s": 1.0, "wall_s": 1.0,
        "requests": steps,
    }  # fmt: skip
    values.update(extra)
    return EpisodeResult.model_validate(values)


def test_targets_and_claims_from_hand_built_rows() -> None:
    rows = [
        *(row("open_loop", 7, n < 2) for n in range(10)),
        *(row("open_loop", 1, n < 8) for n in range(10)),
        *(row("closedloop_pid", 1, True) for _ in range(10)),
        *(row("closedloop_adrc", 7, n < 9, warned_early=n == 9, latency_s=1.1) for n in range(10)),
    ]
    cells = summarise_cells(rows)
    targets = {t.target: t for t in check_targets(cells)}
    assert targets["success at 7 steps"].measured == 0.9
    assert targets["success at 7 steps"].met is False
    assert targets["latency p50 / open loop's"].met is True  # 1.1 / 1.0
    assert targets["model calls / the fewest of any strategy"].measured == 8 / 2
    claims = {c.claim[:20]: c for c in check_claims(rows, cells)}
    assert claims["uncontrolled agents "].verdict == "confirmed"  # 20 %, CI below 60 %
    # 20 % -> 0 % on the point estimates, but no like-for-like row (tenacity, the frozen
    # loop) was run: the summary says no more than its rows.
    pid = claims["PID on a single tool"].verdict
    assert pid.startswith("inconclusive") and "point estimates say confirmed" in pid
    assert claims["the ESO flags 83 % o"].measured.startswith("1/1")


async def test_the_table_names_every_strategy(sleep: FakeSleep) -> None:
    report = await run_faults_bench(tiny(steps=(1,), episodes=1), sleep=sleep)
    console = Console(record=True, width=200)
    render_faults(report, console)
    text = console.export_text()
    for name in ("open_loop", "fixed_retries", "langgraph", "closedloop_pid", "oracle bound"):
        assert name in text
