"""What one run leaves behind: a typed record per step, and the run's result.

These are the contract between the loop (which produces them), the trace writer (which
writes them as JSONL, one ``StepRecord`` a line), the plots, the CLI and the service.
Every signal that crosses a step (docs/architecture.md) has a field here, so a run can be
replayed and plotted from its trace alone.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["ActionCall", "HaltReason", "RunResult", "RunUsageSummary", "StepRecord"]


class HaltReason(StrEnum):
    """Why a run ended. Only ``FINAL`` can be a success; every other end is recorded."""

    FINAL = "final"
    STEP_LIMIT = "step_limit"
    DEADLINE = "deadline"
    BUDGET = "budget"
    CANCELLED = "cancelled"
    NO_PROGRESS = "no_progress"
    REPEATED_ACTION = "repeated_action"
    HANDOVER = "handover"
    ERROR = "error"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ActionCall(_Frozen):
    """A tool call the model proposed: the tool's name and its JSON arguments."""

    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class RunUsageSummary(_Frozen):
    """Model usage attributed to a step or a run."""

    model_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0


class StepRecord(_Frozen):
    """One step of the loop, with every control signal that crossed it."""

    run_id: str
    task_id: str
    step: int = Field(ge=0)
    t_s: float = Field(ge=0.0, description="seconds since the run started")
    phase: str
    mode: str
    step_type: str = Field(description="the key of this step's PID (usually the tool name)")
    action: ActionCall | None = None
    final_answer: str | None = None
    validation_errors: list[str] = Field(default_factory=list)
    observation: dict[str, Any] | None = Field(
        default=None, description="Observation.model_dump(mode='json'), compacted"
    )
    error: float = Field(ge=0.0, le=1.0, description="e(t) of this step")
    control: float = Field(description="u(t) of this step's PID")
    pid_components: tuple[float, float, float] = (0.0, 0.0, 0.0)
    quality: float = Field(ge=0.0, le=1.0, description="q of this step, 1 is perfect")
    f_est: float = Field(ge=0.0, le=1.0)
    protocol: str
    actuators: dict[str, Any] = Field(default_factory=dict)
    lyapunov_v: float | None = None
    lyapunov_dv: float | None = None
    repeat_count: int = 0
    retries: list[dict[str, Any]] = Field(
        default_factory=list,
        description="the loop's retries of a read that answered with a passing fault",
    )
    notes: list[str] = Field(default_factory=list)
    usage: RunUsageSummary = Field(default_factory=RunUsageSummary)
    halt: HaltReason | None = None


class RunResult(_Frozen):
    """The end of a run. ``success`` is only ever true for ``FINAL`` with a complete state."""

    run_id: str
    task_id: str
    halt_reason: HaltReason
    success: bool
    answer: Any = None
    fields: dict[str, Any] = Field(
        default_factory=dict, description="the task's required fields as the run left them"
    )
    steps: list[StepRecord] = Field(default_factory=list)
    usage: RunUsageSummary = Field(default_factory=RunUsageSummary)
    trace_path: str | None = None
    message: str = ""
    handover_id: str | None = None
