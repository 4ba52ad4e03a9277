"""The public surface of closedloop_bench.benchmarks is pinned (adding a name is a decision)."""

from __future__ import annotations

import inspect

import closedloop_bench.benchmarks as bench

EXPECTED = {
    "REPORT_SCHEMA_VERSION", "STRATEGY_NAMES", "TEST_MODELS", "TOOL_ENDPOINTS",
    "AsyncioExecutor", "CachingModel", "CellSummary", "ClaimCheck", "CompletionCache",
    "DemoConfig", "DemoReport", "Episode", "EpisodeExecutor", "EpisodeJob", "EpisodeResult",
    "EpisodeRunner", "FaultTable", "FaultsConfig", "FaultsReport",
    "IdealReference", "Limits", "ModelSource", "OracleVerdict", "Outcome", "OverheadReport",
    "OverheadRow", "Rate", "RayExecutor", "SerialModel", "BenchStrategy", "TargetCheck", "WorldFarm",
    "WorldLease", "cache_key", "check_claims", "check_targets", "default_cache_path",
    "fault_summary", "faults_from_log", "get_strategy", "median_run", "model_source", "oracle_model",
    "oracle_verdict", "percentile", "pick_demo_tasks", "plan_jobs", "planner_faults",
    "plot_curves", "rate", "render_demo", "render_faults", "render_overhead", "run_agent_demo",
    "run_demo_sync", "run_faults_bench", "BudgetPoint", "budget_frontier", "plot_budget",
    "retryable", "run_budget_sweep", "run_overhead_bench", "summarise_cells",
    "wilson_interval", "write_json", "ClaimBaseline", "LambdaCurve", "LambdaPoint", "OnVsFrozen",
}  # fmt: skip


def isort_order(name: str) -> tuple[int, str]:
    """ruff's __all__ order: CONSTANTS, then Classes, then functions."""
    return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)


def test_exported_members_are_pinned_sorted_and_documented() -> None:
    assert set(bench.__all__) == EXPECTED
    assert bench.__all__ == sorted(bench.__all__, key=isort_order)
    for name in bench.__all__:
        obj = getattr(bench, name)
        if isinstance(obj, type) or inspect.isfunction(obj):
            assert obj.__module__ == "closedloop_bench.benchmarks", name
            assert inspect.getdoc(obj), f"{name} has no docstring"
