"""What the evaluator reports: one result per check, and a status for the whole run.

These are pydantic models because they leave the process (bench JSON, traces).
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from ._tasks import CodeTask

__all__ = ["CheckResult", "Evaluation", "EvaluationStatus", "not_run"]


class EvaluationStatus(StrEnum):
    """How a run of the checks ended. Anything but ``passed`` is a failed round."""

    PASSED = "passed"
    """Every check passed."""
    FAILED = "failed"
    """The code ran; some checks failed."""
    NO_CODE = "no_code"
    """There was no code to run (the generator produced none)."""
    SYNTAX_ERROR = "syntax_error"
    """The code is not Python."""
    LOAD_ERROR = "load_error"
    """The code raised while being loaded, or does not define the entry point."""
    TIMEOUT = "timeout"
    """A wall-clock limit ended the run."""
    CPU_LIMIT = "cpu_limit"
    """The CPU-time limit ended the run."""
    MEMORY_LIMIT = "memory_limit"
    """The code ran out of its address space while loading, or was killed for memory."""
    OUTPUT_LIMIT = "output_limit"
    """The code printed more than allowed; the run was stopped."""
    CRASHED = "crashed"
    """The interpreter died (a signal, or an exit in the middle of the checks)."""


class CheckResult(BaseModel):
    """One check's outcome. ``got`` and ``expected`` are reprs, cut to a readable length."""

    model_config = ConfigDict(frozen=True)

    name: str
    passed: bool
    call: str
    got: str | None = None
    expected: str | None = None
    error: str | None = None

    def describe(self) -> str:
        """One line for feedback: ``T3: c.get(2) -> got 2, expected -1``."""
        if self.passed:
            return f"{self.name}: passed"
        details: list[str] = []
        if self.error is not None:
            details.append(self.error)
        if self.got is not None:
            details.append(f"got {self.got}")
        if self.expected is not None:
            details.append(f"expected {self.expected}")
        return f"{self.name}: {self.call} -> {', '.join(details) or 'failed'}"


class Evaluation(BaseModel):
    """The outcome of running one piece of code against a task's checks."""

    model_config = ConfigDict(frozen=True)

    status: EvaluationStatus
    reason: str
    checks: tuple[CheckResult, ...]
    stdout: str = ""
    stderr: str = ""
    duration_s: float = Field(default=0.0, ge=0.0)
    network_isolated: bool = False

    @property
    def total(self) -> int:
        """How many checks the task has."""
        return len(self.checks)

    @property
    def passed(self) -> int:
        """How many checks passed."""
        return sum(1 for c in self.checks if c.passed)

    @property
    def pass_rate(self) -> float:
        """The round's score: the share of checks that passed (0 when there are none)."""
        return self.passed / self.total if self.checks else 0.0

    @property
    def failures(self) -> tuple[CheckResult, ...]:
        """The checks that failed, in task order."""
        return tuple(c for c in self.checks if not c.passed)


def not_run(
    task: CodeTask, status: EvaluationStatus, reason: str, duration: float = 0.0, **extra: Any
) -> Evaluation:
    """An evaluation in which no check ran: every check fails with ``reason``."""
    checks = tuple(
        CheckResult(name=c.name, passed=False, call=c.call, error=f"not run: {reason}")
        for c in task.checks
    )
    return Evaluation(status=status, reason=reason, checks=checks, duration_s=duration, **extra)
