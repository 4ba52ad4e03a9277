"""The agent loop: code owns control, the model proposes one action per step.

Each step: project the structured task state into the context → the model proposes →
validate (schema, phase, dependencies) → final answer? (a code predicate decides) →
repeated action? → execute through the effect ledger → observation → state update by
compare-and-set → control update (PID per step type, ESO → protocol, Lyapunov) → trace.
Every run ends with a named :class:`HaltReason`. See docs/architecture.md.

This package exports what a user of the loop names: the agent and its tasks, tools,
settings, stop policies, results, trace sinks and the views of a finished run. The
machinery behind them stays in the private modules (``_control.py``, ``_repeats.py``, ...);
code inside closedloop imports it from there.
"""

from __future__ import annotations

from types import FunctionType

from .._policy import stop_after_delay, stop_never
from ._acting import EarlyHandover, StormWait
from ._agent import Agent
from ._control_config import ControlConfig, ErrorMetric, default_schedule, edit_distance_metric
from ._coordinator import Coordinator, CoordinatorDecision, SubAgentReport
from ._health import HealthSettings
from ._inflight import Budget
from ._iterate import AgentRun
from ._options import (
    DEFAULT_STOP,
    ContextSettings,
    ModelSettings,
    PlanExecute,
    PlanReview,
    ReAct,
    RunLimits,
    Runtime,
)
from ._otel import OtelSink
from ._plain import PlainLine, PlainView, plain_view, render_plain
from ._plot import plot_run
from ._prewarm import Fingerprint, FingerprintCache, Prewarm, prewarm
from ._reads import ReadRetry
from ._records import (
    ActionCall,
    AgentResult,
    HaltReason,
    RunError,
    RungUsage,
    RunResult,
    RunUsageSummary,
    StepRecord,
)
from ._review import ModelReviewer, ReviewRequest, ReviewVerdict, code_reviewer
from ._run_agent import run_agent
from ._sampling import RiskControl, Sampling
from ._state import PlanStep, RequiredField, Task, TaskState
from ._stop import (
    LoopState,
    StopAll,
    StopAny,
    StopPolicy,
    StopWhen,
    stop_after_steps,
    stop_on_budget,
    stop_on_no_progress,
    stop_on_repeats,
)
from ._tools import Tool, as_tool, requires_nonempty, tool
from ._trace import JsonlTrace, MemoryTrace, MultiSink, TraceSink
from ._trace_files import read_trace

__all__ = [
    "DEFAULT_STOP",
    "ActionCall",
    "Agent",
    "AgentResult",
    "AgentRun",
    "Budget",
    "ContextSettings",
    "ControlConfig",
    "Coordinator",
    "CoordinatorDecision",
    "EarlyHandover",
    "ErrorMetric",
    "Fingerprint",
    "FingerprintCache",
    "HaltReason",
    "HealthSettings",
    "JsonlTrace",
    "LoopState",
    "MemoryTrace",
    "ModelReviewer",
    "ModelSettings",
    "MultiSink",
    "OtelSink",
    "PlainLine",
    "PlainView",
    "PlanExecute",
    "PlanReview",
    "PlanStep",
    "Prewarm",
    "ReAct",
    "ReadRetry",
    "RequiredField",
    "ReviewRequest",
    "ReviewVerdict",
    "RiskControl",
    "RunError",
    "RunLimits",
    "RunResult",
    "RunUsageSummary",
    "RungUsage",
    "Runtime",
    "Sampling",
    "StepRecord",
    "StopAll",
    "StopAny",
    "StopPolicy",
    "StopWhen",
    "StormWait",
    "SubAgentReport",
    "Task",
    "TaskState",
    "Tool",
    "TraceSink",
    "as_tool",
    "code_reviewer",
    "default_schedule",
    "edit_distance_metric",
    "plain_view",
    "plot_run",
    "prewarm",
    "read_trace",
    "render_plain",
    "requires_nonempty",
    "run_agent",
    "stop_after_delay",
    "stop_after_steps",
    "stop_never",
    "stop_on_budget",
    "stop_on_no_progress",
    "stop_on_repeats",
    "tool",
]

# Public names show as closedloop.agent.X in reprs and docs (httpx does the same).
for _name in __all__:
    _obj = globals()[_name]
    if isinstance(_obj, type | FunctionType) and _obj.__module__.startswith(f"{__name__}._"):
        _obj.__module__ = __name__
