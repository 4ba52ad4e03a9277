"""closedloop.harness: refine generated code in a closed loop (PID-driven refinement).

A :class:`Refiner` runs generator → evaluator → feedback rounds on a :class:`CodeTask`. The
evaluator runs the task's checks on the code in a :class:`Sandbox` (a limited
subprocess) and reports a pass rate with got / expected per failing check. The
strategy decides what the generator hears next: :func:`blind_retry`, :func:`self_refine`,
:func:`pid_feedback` (intensity and sampling temperature set by a PID controller; with an
:class:`IntensityMemory`, intensities measured to have no effect are skipped),
:func:`interval`, :func:`auto` and :func:`focused_feedback` (one small failing case, its
line, a diff against the best program). Stop policies (:func:`stop_when_target_met`,
:func:`stop_on_lyapunov`, :func:`stop_on_fixed_point`, ...) combine with ``|``.

A batch can also be refined under one total (:class:`BatchBudget`, in generations or tokens):
:func:`run_budgeted` asks a policy where each generation goes: :func:`spread_evenly`,
:func:`resample_until_pass`, or :func:`error_driven`, the allocator driven by each
problem's measured error; :func:`cost_curve` and :func:`compare_at` read the runs at
equal cost, paired per problem.

Tasks of your own come as a JSONL file in HumanEval's form (:func:`load_task_file`; a bad
line raises :class:`TaskFileError` naming the line and the field); :func:`split_check`
turns each ``check(candidate)`` into one check per scenario by following its data, and
:func:`load_verified_tasks` also runs each reference, and an empty candidate, in the sandbox.

    from closedloop.harness import LRU_CACHE, ModelGenerator, Refiner, pid_feedback
    from closedloop.models import load_model

    refiner = Refiner(ModelGenerator(load_model("local:qwen2.5-coder-0.5b")),
                      strategy=pid_feedback(), max_rounds=3)
    result = refiner.run_sync(LRU_CACHE)
    print(result.scores, result.best_score)
"""

from __future__ import annotations

from ._adaptive import IntensityMemory
from ._allocate import (
    ErrorDriven,
    ResampleUntilPass,
    SpreadEvenly,
    error_driven,
    resample_until_pass,
    spread_evenly,
)
from ._auto import Auto, auto, strategy_from_spec
from ._bench import BenchConfig, BenchReport, LoopGainStop, render_report, run_refine_bench
from ._bench_budget import BudgetBenchConfig, BudgetReport, policy_from_spec, run_budget_bench
from ._budget import (
    AllocationRecord,
    BatchBudget,
    BatchPolicy,
    BatchSession,
    BudgetRun,
    Choice,
    MemoEvaluator,
    ProblemView,
    run_budgeted,
)
from ._budget_report import render_budget_report
from ._cache import GenerationCache, default_generation_cache_path
from ._curves import CurvePoint, PairedComparison, compare_at, cost_curve
from ._diagnosis import (
    Diagnosis,
    ModelDiagnoser,
    StrategyChoice,
    choose_strategy,
    diagnose,
    should_use_pid,
)
from ._evaluation import CheckResult, Evaluation, EvaluationStatus, not_run
from ._focused import FocusedFeedback, focused_feedback
from ._generator import Generation, Generator, ModelGenerator, extract_code
from ._humaneval import HumanEvalProblem, humaneval_data_path, load_humaneval
from ._interval import Interval, interval
from ._prompts import SYSTEM_PROMPT, initial_messages
from ._refiner import Diagnoser, Evaluator, Refiner, SandboxEvaluator
from ._results import RefinementResult, RefinementRound
from ._sandbox import Sandbox, SandboxLimits
from ._split import split_check, split_statements
from ._stop import (
    AnyStop,
    RefineState,
    StopDecision,
    StopReason,
    stop_after_rounds,
    stop_on_fixed_point,
    stop_on_lyapunov,
    stop_on_trajectory,
    stop_when_target_met,
)
from ._strategies import (
    BlindRetry,
    Feedback,
    PIDFeedback,
    SelfRefine,
    Strategy,
    StrategyContext,
    StrategySession,
    blind_retry,
    pid_feedback,
    self_refine,
)
from ._task_file import (
    TaskFileError,
    describe_tasks,
    empty_candidate,
    load_task_file,
    load_verified_tasks,
    verify_references,
)
from ._tasks import Check, CodeTask
from ._tasks_seed import LRU_CACHE, MERGE_SORTED_LISTS, SEED_TASKS, SPIRAL_MATRIX, TTL_CACHE

__all__ = [
    "LRU_CACHE",
    "MERGE_SORTED_LISTS",
    "SEED_TASKS",
    "SPIRAL_MATRIX",
    "SYSTEM_PROMPT",
    "TTL_CACHE",
    "AllocationRecord",
    "AnyStop",
    "Auto",
    "BatchBudget",
    "BatchPolicy",
    "BatchSession",
    "BenchConfig",
    "BenchReport",
    "BlindRetry",
    "BudgetBenchConfig",
    "BudgetReport",
    "BudgetRun",
    "Check",
    "CheckResult",
    "Choice",
    "CodeTask",
    "CurvePoint",
    "Diagnoser",
    "Diagnosis",
    "ErrorDriven",
    "Evaluation",
    "EvaluationStatus",
    "Evaluator",
    "Feedback",
    "FocusedFeedback",
    "Generation",
    "GenerationCache",
    "Generator",
    "HumanEvalProblem",
    "IntensityMemory",
    "Interval",
    "LoopGainStop",
    "MemoEvaluator",
    "ModelDiagnoser",
    "ModelGenerator",
    "PIDFeedback",
    "PairedComparison",
    "ProblemView",
    "RefineState",
    "RefinementResult",
    "RefinementRound",
    "Refiner",
    "ResampleUntilPass",
    "Sandbox",
    "SandboxEvaluator",
    "SandboxLimits",
    "SelfRefine",
    "SpreadEvenly",
    "StopDecision",
    "StopReason",
    "Strategy",
    "StrategyChoice",
    "StrategyContext",
    "StrategySession",
    "TaskFileError",
    "auto",
    "blind_retry",
    "choose_strategy",
    "compare_at",
    "cost_curve",
    "default_generation_cache_path",
    "describe_tasks",
    "diagnose",
    "empty_candidate",
    "error_driven",
    "extract_code",
    "focused_feedback",
    "humaneval_data_path",
    "initial_messages",
    "interval",
    "load_humaneval",
    "load_task_file",
    "load_verified_tasks",
    "not_run",
    "pid_feedback",
    "policy_from_spec",
    "render_budget_report",
    "render_report",
    "resample_until_pass",
    "run_budget_bench",
    "run_budgeted",
    "run_refine_bench",
    "self_refine",
    "should_use_pid",
    "split_check",
    "split_statements",
    "spread_evenly",
    "stop_after_rounds",
    "stop_on_fixed_point",
    "stop_on_lyapunov",
    "stop_on_trajectory",
    "stop_when_target_met",
    "strategy_from_spec",
    "verify_references",
]
