"""The public surface of closedloop.harness is a decision: pinned here."""

from __future__ import annotations

import closedloop.harness as harness

EXPECTED = {
    "AllocationRecord",
    "BatchPolicy",
    "BatchSession",
    "BatchBudget",
    "BudgetBenchConfig",
    "BudgetReport",
    "BudgetRun",
    "Choice",
    "CurvePoint",
    "ErrorDriven",
    "FocusedFeedback",
    "MemoEvaluator",
    "PairedComparison",
    "ProblemView",
    "ResampleUntilPass",
    "SpreadEvenly",
    "compare_at",
    "cost_curve",
    "error_driven",
    "focused_feedback",
    "policy_from_spec",
    "render_budget_report",
    "resample_until_pass",
    "run_budget_bench",
    "run_budgeted",
    "spread_evenly",
    "LRU_CACHE",
    "MERGE_SORTED_LISTS",
    "SEED_TASKS",
    "SPIRAL_MATRIX",
    "SYSTEM_PROMPT",
    "TTL_CACHE",
    "AnyStop",
    "Auto",
    "BenchConfig",
    "BenchReport",
    "BlindRetry",
    "Check",
    "CheckResult",
    "Diagnoser",
    "Diagnosis",
    "Evaluation",
    "EvaluationStatus",
    "Evaluator",
    "Feedback",
    "Generation",
    "GenerationCache",
    "Generator",
    "HumanEvalProblem",
    "IntensityMemory",
    "Interval",
    "LoopGainStop",
    "ModelDiagnoser",
    "ModelGenerator",
    "PIDFeedback",
    "RefineState",
    "RefinementResult",
    "RefinementRound",
    "Refiner",
    "Sandbox",
    "SandboxEvaluator",
    "SandboxLimits",
    "SelfRefine",
    "StopDecision",
    "StopReason",
    "Strategy",
    "StrategyChoice",
    "StrategyContext",
    "StrategySession",
    "CodeTask",
    "TaskFileError",
    "describe_tasks",
    "empty_candidate",
    "load_task_file",
    "load_verified_tasks",
    "split_statements",
    "verify_references",
    "auto",
    "blind_retry",
    "choose_strategy",
    "default_generation_cache_path",
    "diagnose",
    "extract_code",
    "humaneval_data_path",
    "initial_messages",
    "interval",
    "load_humaneval",
    "not_run",
    "pid_feedback",
    "render_report",
    "run_refine_bench",
    "self_refine",
    "should_use_pid",
    "split_check",
    "stop_after_rounds",
    "stop_on_fixed_point",
    "stop_on_lyapunov",
    "stop_on_trajectory",
    "stop_when_target_met",
    "strategy_from_spec",
}


def test_all_is_exactly_the_public_surface() -> None:
    assert set(harness.__all__) == EXPECTED
    assert len(harness.__all__) == len(EXPECTED)
    for name in harness.__all__:
        assert getattr(harness, name) is not None


def test_all_is_sorted_like_ruff_wants() -> None:
    def key(name: str) -> tuple[int, str]:
        kind = 0 if name.isupper() else 1 if name[0].isupper() else 2
        return kind, name

    assert harness.__all__ == sorted(harness.__all__, key=key)


def test_no_private_module_leaks() -> None:
    public = {n for n in dir(harness) if not n.startswith("_")}
    assert public - set(harness.__all__) - {"annotations"} == set()
