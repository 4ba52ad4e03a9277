"""Ending a run on an exception: halt ``error``, with the exception as data in the result.

Whatever raises inside a run (a model that raises something other than a ``ModelError``,
the store, a bug in a tool, an answer that does not fit the output type) ends the run
with a recorded halt instead of a traceback out of ``run_sync``. The result's ``error``
says what was raised and where; a tool's programming error names the tool, so its
author sees their bug rather than a failure of the loop.
"""

from __future__ import annotations

import traceback
from types import TracebackType

from .._exceptions import (
    ModelAuthError,
    ModelLoadError,
    ModelNotAvailableError,
    ModelUnreachableError,
    OutputValidationError,
    SecretUnavailableError,
)
from ..execution import PROGRAMMING_ERRORS, AtomicAction
from ..feedback._store import BaseStore
from ..models import Model
from ._records import HaltReason, RunError, RunResult, StepRecord
from ._run import Run, tool_effects
from ._trace import TraceSink

__all__ = ["describe_error", "end_with_error"]


def _raised_in(tb: TracebackType | None) -> tuple[str, str | None]:
    """Which part raised: the innermost tool call or model call the exception went through."""
    where: str = "loop"
    tool: str | None = None
    invoke = AtomicAction.invoke.__code__
    for frame, _ in traceback.walk_tb(tb):
        owner = frame.f_locals.get("self")
        if frame.f_code is invoke and isinstance(owner, AtomicAction):
            where, tool = "tool", owner.name
        elif isinstance(owner, Model) and where == "loop":
            where = "model"
        elif isinstance(owner, BaseStore) and where == "loop":
            where = "store"
    return where, tool


def describe_error(exc: BaseException) -> RunError:
    """The exception as a :class:`RunError`: its type, its message and who raised it."""
    if isinstance(exc, OutputValidationError):
        where, tool = "output", None
    else:
        where, tool = _raised_in(exc.__traceback__)
    return RunError(
        type=type(exc).__name__,
        message=str(exc),
        where=where,  # type: ignore[arg-type]  # one of RunError's literals, by construction
        tool=tool,
        programming_error=isinstance(exc, PROGRAMMING_ERRORS),
    )


async def end_with_error(run: Run, exc: BaseException) -> RunError:
    """End ``run`` as ``error`` (or mark its result so) and put the error in the result."""
    error = describe_error(exc)
    message = f"ended by an error: {error.summary()}"
    halt = HaltReason.ERROR
    if isinstance(exc, SecretUnavailableError):  # a named end: the caller's setup, not a bug
        halt, message = HaltReason.SECRET_UNAVAILABLE, f"secret unavailable: {exc}"
    elif isinstance(exc, ModelUnreachableError):
        halt, message = HaltReason.MODEL_UNREACHABLE, f"model unreachable: {exc}"
    elif isinstance(exc, ModelNotAvailableError | ModelLoadError | ModelAuthError):
        halt, message = HaltReason.MODEL_UNAVAILABLE, f"model unavailable: {exc}"
    if run.result is None:
        run.sink = _WithError(run.sink, error)  # the trace's result carries the error too
        try:
            await run.finish(halt, message=message)
        except Exception:  # the store or the trace is what failed: still give a result
            if run.result is None:
                run.result = _bare_result(run, message)
    assert run.result is not None
    run.result = run.result.model_copy(
        update={
            "halt_reason": halt,
            "success": False,
            "answer": None,
            "message": message,
            "error": error,
        }
    )
    return error


class _WithError:
    """A trace sink that closes with the run's error in the result."""

    def __init__(self, inner: TraceSink, error: RunError) -> None:
        self.inner = inner
        self.error = error

    async def write(self, record: StepRecord) -> None:
        await self.inner.write(record)

    async def close(self, result: RunResult) -> None:
        await self.inner.close(result.model_copy(update={"error": self.error}))


def _bare_result(run: Run, message: str) -> RunResult:
    state = run.state
    return RunResult(
        run_id=state.run_id,
        task_id=state.task_id,
        halt_reason=HaltReason.ERROR,
        success=False,
        fields=dict(state.required_fields),
        steps=list(run.records),
        tool_effects=tool_effects(run.settings.tools),
        trace_path=run.trace_path,
        message=message,
    )
