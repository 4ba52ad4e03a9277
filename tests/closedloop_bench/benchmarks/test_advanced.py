"""The advanced-control benchmark: every row beside plain closedloop, on the same episodes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from closedloop import ConfigurationError
from closedloop_bench.benchmarks._advanced import (
    AdvancedConfig,
    render_advanced,
    run_advanced_bench,
)
from closedloop_bench.benchmarks._advanced_report import _auc

from .conftest import FakeSleep


def test_the_auc_counts_failed_runs_scored_above_successful_ones() -> None:
    assert _auc([0.9, 0.8], [0.1, 0.2]) == 1.0
    assert _auc([0.1], [0.9]) == 0.0
    assert _auc([0.5], [0.5]) == 0.5
    assert _auc([], [0.5]) is None


@pytest.mark.parametrize(
    ("field", "value"), [("eval_per_domain", 0), ("warn", 1.5), ("profiles", ())]
)
def test_bad_settings_are_refused_by_name(field: str, value: object) -> None:
    with pytest.raises(ConfigurationError, match=field):
        AdvancedConfig(**{field: value})  # type: ignore[arg-type]


async def test_a_small_run_reports_every_row_beside_plain(tmp_path: Path, sleep: FakeSleep) -> None:
    out = tmp_path / "advanced.json"
    config = AdvancedConfig(
        profiles=("seed000",),
        tune_per_domain=1,
        min_tune_episodes=8,
        eval_per_domain=1,
        team_tasks=2,
        latency_scale=0.0,
        concurrency=4,
        out=out,
    )
    report = await run_advanced_bench(config, sleep=sleep)
    # one dev episode per domain is too few: the tuner says so and builds no table
    assert report.tuning["changed"] is False
    assert "too few episodes" in report.tuning["message"]
    variants = [r.variant for r in report.rows]
    assert variants == [
        "prewarm",
        "tiered",
        "prewarm+tiered",
        "team:single",
        "team:team",
        "team:coordinated",
    ]
    loop_rows, team_rows = report.rows[:3], report.rows[3:]
    for row in loop_rows:
        assert row.episodes == 4 and row.profile == "seed000"
        assert 0.0 <= row.success <= 1.0 and row.plain_model_calls > 0
        assert row.first_error is not None and row.plain_first_error is not None
    for row in team_rows:  # the report task only; the team calls no model
        assert row.episodes == 2 and row.part == "distributed control (report)"
        assert row.model_calls == 0 and row.requests > 0 and "re-plans" in row.note
    # the plain row is the same for every variant: one plain run per episode
    assert len({(r.plain_success, r.plain_model_calls) for r in loop_rows}) == 1
    assert len({(r.plain_success, r.plain_model_calls) for r in team_rows}) == 1
    assert set(report.spread) == {"seed000:fixed"}
    assert len(report.spread["seed000:fixed"]["per_domain"]) == 4
    assert sum(lv["episodes"] for lv in report.levels if lv["variant"] == "plain") == 4
    assert report.plain_view["seed000"]["runs"] == 4
    saved = json.loads(out.read_text(encoding="utf-8"))
    assert saved["rows"][0]["variant"] == "prewarm"
    text = render_advanced(report)
    assert "| pre-warm | prewarm | seed000 | 4 |" in text and "too few episodes" in text
