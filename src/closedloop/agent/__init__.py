"""The agent loop: code owns control, the model proposes one action per step.

Each step: project the structured task state into the context → the model proposes →
validate (schema, phase, dependencies) → final answer? (a code predicate decides) →
repeated action? → execute through the effect ledger → observation → state update by
compare-and-set → control update (PID per step type, ESO → protocol, Lyapunov) → trace.
Every run ends with a named :class:`HaltReason`. See ARCHITECTURE.md.
"""

from __future__ import annotations

from types import FunctionType

from ._actions import Proposal, action_schema, inline_refs, plan_schema
from ._agent import Agent
from ._control import (
    EMPTY_ERROR,
    ControlConfig,
    ControllerBank,
    ErrorMetric,
    TaskControl,
    confidence_deficit,
    default_schedule,
    edit_distance_metric,
    rigour_instruction,
)
from ._coordinator import Coordinator, Decision, SubAgentReport
from ._inflight import Budget
from ._iterate import AgentRun
from ._modes import MODES
from ._otel import OtelSink
from ._plain import PlainLine, PlainView, plain_view, render_plain, risk_label
from ._plot import ControlSeries, control_series, plot_run
from ._prewarm import (
    Fingerprint,
    FingerprintCache,
    Prewarm,
    prewarm,
    query_features,
    query_key,
    seed_history,
    trace_with_notes,
)
from ._projection import ProjectionOptions
from ._protocols import SuccessMemory, agree, intersect
from ._reads import ReadRetry, is_transient
from ._records import ActionCall, HaltReason, RunResult, RunUsageSummary, StepRecord
from ._repeats import VOLATILE_KEYS, action_signature, looks_volatile, normalise_arguments
from ._review import ModelReviewer, ReviewRequest, ReviewVerdict, code_reviewer
from ._run_agent import run_agent, run_agent_async
from ._state import PendingAction, PlanStep, RequiredField, Task, TaskState
from ._stop import (
    LoopState,
    StopAll,
    StopAny,
    StopPolicy,
    StopWhen,
    stop_after_delay,
    stop_after_steps,
    stop_never,
    stop_on_budget,
    stop_on_no_progress,
    stop_on_repeats,
)
from ._tools import Tool, as_tool, requires_nonempty, to_observation, tool, tools_by_name
from ._trace import (
    RESULT_FILE,
    TRACE_FILE,
    JsonlTrace,
    MemoryTrace,
    MultiSink,
    RunPaths,
    TraceSink,
    build_audit,
    read_trace,
    resolve_run,
    run_dir,
    runs_root,
    to_json_text,
)
from ._validate import PHASE_ACTIONS

__all__ = [
    "EMPTY_ERROR",
    "MODES",
    "PHASE_ACTIONS",
    "RESULT_FILE",
    "TRACE_FILE",
    "VOLATILE_KEYS",
    "ActionCall",
    "Agent",
    "AgentRun",
    "Budget",
    "ControlConfig",
    "ControlSeries",
    "ControllerBank",
    "Coordinator",
    "Decision",
    "ErrorMetric",
    "Fingerprint",
    "FingerprintCache",
    "HaltReason",
    "JsonlTrace",
    "LoopState",
    "MemoryTrace",
    "ModelReviewer",
    "MultiSink",
    "OtelSink",
    "PendingAction",
    "PlainLine",
    "PlainView",
    "PlanStep",
    "Prewarm",
    "ProjectionOptions",
    "Proposal",
    "ReadRetry",
    "RequiredField",
    "ReviewRequest",
    "ReviewVerdict",
    "RunPaths",
    "RunResult",
    "RunUsageSummary",
    "StepRecord",
    "StopAll",
    "StopAny",
    "StopPolicy",
    "StopWhen",
    "SubAgentReport",
    "SuccessMemory",
    "Task",
    "TaskControl",
    "TaskState",
    "Tool",
    "TraceSink",
    "action_schema",
    "action_signature",
    "agree",
    "as_tool",
    "build_audit",
    "code_reviewer",
    "confidence_deficit",
    "control_series",
    "default_schedule",
    "edit_distance_metric",
    "inline_refs",
    "intersect",
    "is_transient",
    "looks_volatile",
    "normalise_arguments",
    "plain_view",
    "plan_schema",
    "plot_run",
    "prewarm",
    "query_features",
    "query_key",
    "read_trace",
    "render_plain",
    "requires_nonempty",
    "resolve_run",
    "rigour_instruction",
    "risk_label",
    "run_agent",
    "run_agent_async",
    "run_dir",
    "runs_root",
    "seed_history",
    "stop_after_delay",
    "stop_after_steps",
    "stop_never",
    "stop_on_budget",
    "stop_on_no_progress",
    "stop_on_repeats",
    "to_json_text",
    "to_observation",
    "tool",
    "tools_by_name",
    "trace_with_notes",
]

# Public names show as closedloop.agent.X in reprs and docs (httpx does the same).
for _name in __all__:
    _obj = globals()[_name]
    if isinstance(_obj, type | FunctionType):
        _obj.__module__ = __name__
