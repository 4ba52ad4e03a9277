"""What one run leaves behind: a typed record per step, and the run's result.

These are the contract between the loop (which produces them), the trace writer (which
writes them as JSONL, one ``StepRecord`` a line), the plots, the CLI and the service.
Every signal that crosses a step (docs/architecture.md) has a field here, so a run can be
replayed and plotted from its trace alone.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from typing import Any, Generic, Literal

from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import TypeVar

from ..models import Confidence

__all__ = [
    "ActionCall",
    "AgentResult",
    "HaltReason",
    "RunError",
    "RunResult",
    "RunUsageSummary",
    "RungUsage",
    "StepRecord",
]

# The type of an agent's output; a bare ``Agent`` or ``AgentResult`` answers in text.
OutputT = TypeVar("OutputT", default=str)


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
    ABSTAINED = "abstained"
    """Before any tool ran, the first proposal's confidence was below
    ``Sampling.abstain_below``: the run answers that no offered tool fits (the result's
    ``answer``) instead of running a call it is unsure of. Not a success."""
    ERROR = "error"
    SECRET_UNAVAILABLE = "secret_unavailable"
    """A tool call referred to a secret that could not be resolved (unknown, or its
    resolver failed); the result's ``error`` names it."""
    MODEL_UNAVAILABLE = "model_unavailable"
    """The model cannot answer at all: its file is not on disk or cannot be loaded, or its
    server refused the credentials; the result's ``error`` names the fix."""
    MODEL_UNREACHABLE = "model_unreachable"
    """The model's server could not be reached (after the client's own retries); the
    result's ``error`` names the address."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ActionCall(_Frozen):
    """A tool call the model proposed: the tool's name and its JSON arguments."""

    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class RungUsage(_Frozen):
    """What the proposals cost on one rung of a model ladder (a single model is rung 0):
    calls, tokens in and out, seconds spent waiting for the model, and dollars (the
    rung's price where it has one, else the model's own)."""

    rung: int = Field(ge=0)
    model: str
    model_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    cost: float = 0.0

    def __add__(self, other: RungUsage) -> RungUsage:
        return RungUsage(
            rung=self.rung,
            model=self.model,
            model_calls=self.model_calls + other.model_calls,
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            seconds=self.seconds + other.seconds,
            cost=self.cost + other.cost,
        )


class RunUsageSummary(_Frozen):
    """Model usage attributed to a step or a run; ``rungs`` splits the proposals' share
    of it by rung of the model ladder, cheapest first."""

    model_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    rungs: list[RungUsage] = Field(default_factory=list)

    @classmethod
    def total(cls, parts: Iterable[RunUsageSummary]) -> RunUsageSummary:
        """The sum of ``parts``, rung by rung."""
        calls = prompt = completion = 0
        cost = 0.0
        rungs: dict[tuple[int, str], RungUsage] = {}
        for part in parts:
            calls += part.model_calls
            prompt += part.prompt_tokens
            completion += part.completion_tokens
            cost += part.cost
            for r in part.rungs:
                key = (r.rung, r.model)
                rungs[key] = rungs[key] + r if key in rungs else r
        return cls(
            model_calls=calls,
            prompt_tokens=prompt,
            completion_tokens=completion,
            cost=cost,
            rungs=[rungs[k] for k in sorted(rungs)],
        )


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
    effect: str | None = Field(
        default=None,
        description="the effect class of the tool the step called (recomputable, "
        "overwritable, once or irreversible): whether it may be repeated",
    )
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
    confidence: Confidence | None = Field(
        default=None,
        description="the confidence sensors' reading on the proposal, before its call ran",
    )


class RunError(_Frozen):
    """The exception that ended a run (halt ``error``), as data.

    ``where`` says which part raised it: the model, a tool (then ``tool`` names it), the
    state store, the output check, or the loop itself. ``programming_error`` marks an error that
    means the code is wrong (``TypeError``, ``AttributeError``, ...), not the world.
    """

    type: str = Field(description="the exception's class name")
    message: str
    where: Literal["model", "tool", "store", "output", "loop"] = "loop"
    tool: str | None = None
    programming_error: bool = False

    def summary(self) -> str:
        """One line for the run's message: who raised what."""
        who = f"tool {self.tool!r} " if self.tool is not None else ""
        kind = "programming error " if self.programming_error else ""
        return f"{who}{kind}{self.type}: {self.message}".strip()


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
    tool_effects: dict[str, str] = Field(
        default_factory=dict, description="each tool the run was given, by its effect class"
    )
    usage: RunUsageSummary = Field(default_factory=RunUsageSummary)
    trace_path: str | None = None
    message: str = ""
    handover_id: str | None = None
    error: RunError | None = Field(
        default=None, description="the exception that ended the run, when it ended as error"
    )


class AgentResult(RunResult, Generic[OutputT]):
    """A :class:`RunResult` with the answer parsed into the agent's ``output_type``.

    ``output`` is set when the run succeeded (``FINAL`` with a complete state): the answer
    text for ``output_type=str``, else the answer validated by pydantic (as JSON, as a
    plain value, or from the task's fields). An answer that does not validate ends the
    run as ``error`` with the validation error in ``error``.
    """

    output: OutputT | None = None
