"""closedloop_bench.benchmarks: what closing the loop buys, measured side by side with today's practice.

``run_faults_bench(FaultsConfig(...))`` runs open loop, fixed retries, LangGraph and
closedloop (PID, PID+ADRC) on the same tasks, tools, model and fault seeds against
``closedloop_bench.world``, and reports success per step count with 95 % intervals, model
calls, tokens, latency, handovers and the oracle bound; it judges the published claims
against the open loop, tenacity on the same retry predicate and the frozen controller
(:class:`ClaimBaseline`), reads every controller-on row against its frozen counterpart
(:class:`OnVsFrozen`) and, over profiles ``NAME@λ``, draws success against λ
(:class:`LambdaCurve`). ``run_overhead_bench()`` measures
what the loop itself costs per step. ``run_agent_demo()`` is ``closedloop demo``.
``FaultsConfig(executor="ray")`` (or a :class:`RayExecutor`) runs the episodes as Ray tasks.
"""

from __future__ import annotations

from inspect import isfunction

from ._budget import BudgetPoint, budget_frontier, plot_budget, run_budget_sweep
from ._cache import CachingModel, CompletionCache, cache_key, default_cache_path
from ._demo import (
    DemoConfig,
    DemoReport,
    pick_demo_tasks,
    render_demo,
    run_agent_demo,
    run_demo_sync,
)
from ._faults import check_claims, check_targets, run_faults_bench, summarise_cells
from ._models import TEST_MODELS, ModelSource, SerialModel, model_source
from ._oracle import (
    TOOL_ENDPOINTS,
    FaultTable,
    OracleVerdict,
    fault_summary,
    faults_from_log,
    oracle_verdict,
    planner_faults,
)
from ._overhead import (
    OverheadReport,
    OverheadRow,
    median_run,
    run_overhead_bench,
)
from ._overhead_render import render_overhead
from ._ray import RayExecutor
from ._report import (
    REPORT_SCHEMA_VERSION,
    CellSummary,
    ClaimBaseline,
    ClaimCheck,
    EpisodeResult,
    FaultsReport,
    LambdaCurve,
    LambdaPoint,
    OnVsFrozen,
    TargetCheck,
    plot_curves,
    render_faults,
    write_json,
)
from ._runner import (
    AsyncioExecutor,
    EpisodeExecutor,
    EpisodeJob,
    EpisodeRunner,
    FaultsConfig,
    plan_jobs,
)
from ._stats import Rate, percentile, rate, wilson_interval
from ._strategies import (
    STRATEGY_NAMES,
    BenchStrategy,
    Episode,
    Limits,
    Outcome,
    get_strategy,
    retryable,
)
from ._testmodel import IdealReference, oracle_model
from ._worlds import WorldFarm, WorldLease

__all__ = [
    "REPORT_SCHEMA_VERSION",
    "STRATEGY_NAMES",
    "TEST_MODELS",
    "TOOL_ENDPOINTS",
    "AsyncioExecutor",
    "BenchStrategy",
    "BudgetPoint",
    "CachingModel",
    "CellSummary",
    "ClaimBaseline",
    "ClaimCheck",
    "CompletionCache",
    "DemoConfig",
    "DemoReport",
    "Episode",
    "EpisodeExecutor",
    "EpisodeJob",
    "EpisodeResult",
    "EpisodeRunner",
    "FaultTable",
    "FaultsConfig",
    "FaultsReport",
    "IdealReference",
    "LambdaCurve",
    "LambdaPoint",
    "Limits",
    "ModelSource",
    "OnVsFrozen",
    "OracleVerdict",
    "Outcome",
    "OverheadReport",
    "OverheadRow",
    "Rate",
    "RayExecutor",
    "SerialModel",
    "TargetCheck",
    "WorldFarm",
    "WorldLease",
    "budget_frontier",
    "cache_key",
    "check_claims",
    "check_targets",
    "default_cache_path",
    "fault_summary",
    "faults_from_log",
    "get_strategy",
    "median_run",
    "model_source",
    "oracle_model",
    "oracle_verdict",
    "percentile",
    "pick_demo_tasks",
    "plan_jobs",
    "planner_faults",
    "plot_budget",
    "plot_curves",
    "rate",
    "render_demo",
    "render_faults",
    "render_overhead",
    "retryable",
    "run_agent_demo",
    "run_budget_sweep",
    "run_demo_sync",
    "run_faults_bench",
    "run_overhead_bench",
    "summarise_cells",
    "wilson_interval",
    "write_json",
]

# Public names show as closedloop_bench.benchmarks.X in reprs and docs (httpx does the same).
for _name in __all__:
    _obj = globals()[_name]
    if isinstance(_obj, type) or isfunction(_obj):
        _obj.__module__ = __name__
del _name, _obj
