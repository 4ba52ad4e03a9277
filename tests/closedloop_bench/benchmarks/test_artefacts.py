"""The studies one faults run produces after its table: which grid and profiles they take."""

from __future__ import annotations

from pathlib import Path

from closedloop_bench.benchmarks import FaultsConfig
from closedloop_bench.benchmarks._artefacts import (
    frontier_plan,
    run_frontier,
    run_study,
    warnings_config,
)

from .conftest import FakeSleep, tiny


def test_the_frontier_runs_where_the_budget_target_is_stated() -> None:
    quick = FaultsConfig.quick_preset(profiles=("seed000", "regimes@0.1"), latency_scale=0.3)
    plan = frontier_plan(quick)
    assert plan.config.profiles == ("regimes@0.2",)  # no λ >= 0.2 in the run: the default
    assert (plan.attempts, plan.backoffs) == ((1, 3, 5), (0.5,))
    assert plan.config.steps == (3, 5) and plan.config.episodes == 3
    assert plan.config.latency_scale == 0.3 and plan.config.out is None  # the run's settings
    steep = FaultsConfig(profiles=("regimes@0.1", "regimes@0.3", "regimes@0.5"))
    full = frontier_plan(steep)
    assert full.config.profiles == ("regimes@0.3", "regimes@0.5")
    assert full.attempts == (1, 2, 3, 4, 5, 6) and full.backoffs == (0.1, 0.5, 2.0)
    asked = frontier_plan(steep, steps=(1,), episodes=2)
    assert (asked.config.steps, asked.config.episodes) == ((1,), 2)


def test_the_early_warning_study_takes_the_runs_regime_profiles() -> None:
    plain = warnings_config(FaultsConfig.quick_preset())
    assert plain.profiles == ("regimes@0.1", "regimes@0.2")
    assert plain.strategies == ("closedloop_adrc",) and plain.episodes == 2
    assert plain.steps == (5, 7, 10)
    mixed = warnings_config(FaultsConfig(profiles=("seed000", "regimes@0.3")), steps=(3,))
    assert mixed.profiles == ("regimes@0.3",) and mixed.episodes == 8 and mixed.steps == (3,)


async def test_both_studies_write_their_files(tmp_path: Path, sleep: FakeSleep) -> None:
    config = tiny(profiles=("regimes@0.3",), steps=(1,), episodes=1, quick=True)
    plan = frontier_plan(config, steps=(1,), episodes=1)
    sweep, png = await run_frontier(plan, tmp_path, sleep=sleep)
    assert [p["attempts"] for p in sweep["fixed"]] == [1, 3, 5]
    assert {p["strategy"] for p in sweep["adaptive"]} == {"closedloop_pid", "closedloop_budget"}
    assert (tmp_path / "sweep.json").exists() and png is not None and png.exists()
    report, path = await run_study(warnings_config(config, episodes=1), tmp_path, sleep=sleep)
    assert path == tmp_path / "early_warning.json" and path.exists()
    assert report["episodes"] == 3  # steps 5, 7 and 10, one episode each
