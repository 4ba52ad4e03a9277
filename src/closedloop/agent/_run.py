"""One run: what persists from one step to the next, its halt checks, its end.

A step (``_driver.py``) reads the run and its task state and returns values; its fold
stage writes what the step changed into the state (through ``_fold.py``, the one writer)
and asks :meth:`Run.stop_reason` whether the run must end, and :meth:`Run.commit` keeps
the step's record: the trace, then the state saved by compare-and-set, or the run ended on the
record's halt (:meth:`Run.finish`). What a step hands the next travels in the value the
driver passes on (``_view.Carry``), never in the run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .._exceptions import StateError
from ..decision import HybridController, default_rules
from ..execution import EffectLedger, Executor
from ..execution._secret import RunSecrets
from ..feedback import StateStore
from ._actuators import Actuators, Controllers
from ._control import ControllerBank, TaskControl
from ._deferred import DeferredRecords
from ._fold import fold_end, fold_fields
from ._health import ToolHealth
from ._inflight import Budget, Deadline, cancel_waiter
from ._model_port import ModelPort
from ._protocols import SuccessMemory
from ._records import HaltReason, RunResult, RunUsageSummary, StepRecord
from ._settings import LoopSettings
from ._state import StateHandle, Task, TaskState, field_problems
from ._stop import LoopState, halt_reason
from ._tool_port import ToolPort
from ._tools import Tool
from ._trace import TraceSink
from ._validate import Validator

__all__ = [
    "Run",
]


class Run:
    """One run of an agent over one task (created by ``Agent``; not public)."""

    def __init__(
        self,
        settings: LoopSettings,
        task: Task,
        state: TaskState,
        *,
        handle: StateHandle,
        store: StateStore,
        sink: TraceSink,
        trace_path: str | None,
        budget: Budget | None,
        cancel: Any,
        bank: ControllerBank,
        health: ToolHealth | None = None,
        secrets: RunSecrets | None = None,
    ) -> None:
        self.settings = settings
        self.health = health  # the agent's tool breakers and latencies, if it keeps them
        self.task = task
        self.state = state
        self.handle = handle
        self.store = store
        self.sink = sink
        self.trace_path = trace_path
        self.budget = budget
        self.cancel = cancel
        self._cancel_wait = cancel_waiter(cancel)
        self.controllers = Controllers(bank)
        # The run's secrets: declared ones, and those found in its text (values held here only).
        self.secrets = secrets if secrets is not None else RunSecrets(settings.secrets)
        self.validator = Validator(settings.tools)
        deferred = bank.store if isinstance(bank.store, DeferredRecords) else None
        self.deferred = deferred
        self.memory = SuccessMemory(store if deferred is None else deferred)
        # The two doors to the outside: every model call and every tool call goes through one.
        self.model_io = ModelPort(settings, budget, self)
        # The ledger's owner is the run's session: a recovery of this run resolves its own
        # claims, another run's live claim on the same key is waited for.
        ledger = EffectLedger(
            handle.ledger_store(), owner=handle.session_id, clock=settings.wall_clock
        )
        executor = Executor(ledger, sleep=settings.sleep, clock=settings.clock)
        self.tool_io = ToolPort(settings, executor, self, health=health, secrets=self.secrets)
        setpoint = task.complexity if task.complexity is not None else settings.control.setpoint
        self.control = TaskControl(settings.control, setpoint)
        self.control.restore(state.control)
        # Known causes (empty, 429, 5xx, timeout, stale) get the decision layer's rules
        # first; their advice reaches the model as a note, never as an action of its own.
        self.rules = HybridController(default_rules(), tolerance=0.0, clock=settings.wall_clock)
        self.records: list[StepRecord] = []
        self.result: RunResult | None = None
        self._started = settings.clock()
        self._elapsed_before = state.elapsed_s
        limit = settings.stop.max_delay_s()
        self.deadline_s = settings.deadline_s if limit is None else min(limit, settings.deadline_s)

    # --- time, budget, stop ------------------------------------------------------------

    def elapsed(self) -> float:
        return self._elapsed_before + max(0.0, self.settings.clock() - self._started)

    def watchers(self) -> dict[HaltReason, Callable[[], Any]]:
        out: dict[HaltReason, Callable[[], Any]] = {}
        if self._cancel_wait is not None:
            out[HaltReason.CANCELLED] = self._cancel_wait
        if self.budget is not None:
            out[HaltReason.BUDGET] = self.budget.wait_exhausted
        out[HaltReason.DEADLINE] = Deadline(self.deadline_s - self.elapsed(), self.settings.sleep)
        return out

    def loop_state(self, actuators: Actuators | None = None) -> LoopState:
        """The run's snapshot between two steps; the last error is the one the last step
        handed on (``actuators``)."""
        s = self.state
        last = None if actuators is None or actuators.last is None else actuators.last[0]
        return LoopState(
            step=s.step,
            elapsed_s=self.elapsed(),
            tokens=s.budget.tokens_used,
            cost=s.budget.cost_used,
            model_calls=s.budget.model_calls,
            no_progress_steps=s.no_progress_steps,
            repeat_count=s.repeat_count,
            replan_count=s.replan_count,
            last_error=last,
            f_est=self.control.f_est,
            protocol=self.control.protocol.value,
            phase=s.phase,
        )

    def stop_reason(self, actuators: Actuators | None = None) -> HaltReason | None:
        """Any reason to end the run now (checked before and after every step)."""
        if self.cancel is not None and self.cancel.is_set():
            return HaltReason.CANCELLED
        if self.budget is not None and self.budget.exhausted:
            return HaltReason.BUDGET
        if self.elapsed() >= self.deadline_s:
            return HaltReason.DEADLINE
        return halt_reason(self.settings.stop(self.loop_state(actuators)))

    # --- folding a step in ------------------------------------------------------------------

    def refresh_fields(self) -> None:
        """Check the state's required fields against the task's (a run that starts)."""
        fold_fields(self.state, self.task.required_fields)

    async def save(self) -> None:
        """Save the task state by compare-and-set, with the hints that wait for it."""
        waiting = [] if self.deferred is None else self.deferred.drain()
        try:
            await self.handle.save(self.state, waiting)
        except BaseException:
            if self.deferred is not None:
                self.deferred.requeue(waiting)
            raise

    async def commit(self, record: StepRecord) -> None:
        """Keep the step's record: the trace, then the state saved by compare-and-set, or
        the run ended on the record's halt."""
        self.records.append(record)
        await self.sink.write(record)
        if record.halt is None:
            await self.save()
        else:
            kept = record.halt in (HaltReason.FINAL, HaltReason.ABSTAINED)
            answer = record.final_answer if kept else None
            await self.finish(record.halt, answer=answer)

    async def finish(
        self, halt: HaltReason, *, answer: str | None = None, message: str = ""
    ) -> RunResult:
        """End the run: persist the final state, close the trace, build the result."""
        state = self.state
        fold_end(state, halt, answer=answer, elapsed_s=self.elapsed())
        complete = not field_problems(self.task.required_fields, state.required_fields)
        success = halt is HaltReason.FINAL and complete
        try:
            await self.save()
        except StateError as exc:  # e.g. another writer won the CAS: still close the trace
            message = f"{message or halt.value}; the final state was not saved ({exc})"
            if self.deferred is not None:
                await self.deferred.flush()
        b = state.budget
        run_usage = RunUsageSummary.total(r.usage for r in self.records)
        result = RunResult(
            run_id=state.run_id,
            task_id=state.task_id,
            halt_reason=halt,
            success=success,
            answer=state.answer if success or halt is HaltReason.ABSTAINED else None,
            fields=dict(state.required_fields),
            steps=list(self.records),
            tool_effects=tool_effects(self.settings.tools),
            usage=run_usage,
            trace_path=self.trace_path,
            message=message or _message(halt, state, b.tokens_used),
            handover_id=state.handover_id if halt is HaltReason.HANDOVER else None,
        )
        self.result = result
        await self.sink.close(result)
        return result


def tool_effects(tools: Mapping[str, Tool]) -> dict[str, str]:
    """Each tool's effect class by its name, for the result (whether it may be repeated)."""
    return {name: tool.effect.value for name, tool in tools.items()}


def _message(halt: HaltReason, state: TaskState, tokens: int) -> str:
    done = f"after {state.step} step(s), {state.elapsed_s:.2f} s, {tokens} tokens"
    texts = {
        HaltReason.FINAL: "final answer accepted",
        HaltReason.STEP_LIMIT: "ran out of steps before the task was complete",
        HaltReason.DEADLINE: "ran out of time before the task was complete",
        HaltReason.BUDGET: "the budget was spent before the task was complete",
        HaltReason.CANCELLED: "cancelled",
        HaltReason.NO_PROGRESS: "stopped: no new information in the last steps",
        HaltReason.REPEATED_ACTION: "stopped: the model kept repeating the same action",
        HaltReason.HANDOVER: "handed over to a human",
        HaltReason.ABSTAINED: "abstained: no offered tool fits with enough confidence",
        HaltReason.ERROR: "ended by an error",
        HaltReason.SECRET_UNAVAILABLE: "a secret a tool call needs could not be resolved",
    }
    return f"{texts[halt]} {done}"
