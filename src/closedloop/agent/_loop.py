"""One run's state machine: time and stop checks, fields, closing a step, ending the run.

``_io.py`` makes the model and tool calls and ``_modes.py`` strings everything into steps
(ReAct, plan-and-execute, planner/executor/reviewer); this module owns what every step
ends with, in the order of ARCHITECTURE.md: state update by compare-and-set → control
update (PID, ESO → protocol, Lyapunov) → trace record → halt check.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._exceptions import StateError
from ..control import ActuatorSettings, LyapunovVerdict
from ..decision import HybridController, default_rules
from ..execution import Confirmation, EffectLedger, Executor
from ..feedback import StateStore
from ..models import Model
from ..perception import Observation, ObservationStatus
from ._control import ControlConfig, ControllerBank, TaskControl
from ._deferred import DeferredRecords
from ._inflight import Budget, cancel_waiter
from ._projection import ProjectionOptions
from ._protocols import SuccessMemory
from ._reads import ReadRetry
from ._records import ActionCall, HaltReason, RunResult, RunUsageSummary, StepRecord
from ._state import StateHandle, Task, TaskState, field_problems
from ._stop import LoopState, StopPolicy
from ._tools import Tool
from ._trace import TraceSink
from ._validate import Validator

__all__ = ["LoopSettings", "Run"]

Sleep = Callable[[float], Awaitable[None]]


@dataclass(frozen=True, slots=True, kw_only=True)
class LoopSettings:
    """Everything an :class:`~closedloop.agent.Agent` fixes for its runs."""

    model: Model
    tools: Mapping[str, Tool]
    mode: str
    max_steps: int
    deadline_s: float
    stop: StopPolicy
    control: ControlConfig
    max_tokens: int
    temperature: float
    seed: int
    native: bool
    verifier: Model | None
    dual_temperature: float
    reviewer: Any  # a _modes.Reviewer or ModelReviewer
    max_replans: int
    max_plan_steps: int
    max_sendbacks: int
    repeat_window: int
    observation_chars: int
    keep_observations: int
    projection: ProjectionOptions
    format_answer: Callable[[str, Mapping[str, Any]], str] | None
    clock: Callable[[], float]
    wall_clock: Callable[[], float]
    sleep: Sleep
    read_retry: ReadRetry = field(default_factory=ReadRetry)


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
        confirmation: Confirmation | None = None,
    ) -> None:
        self.settings = settings
        self.task = task
        self.state = state
        self.handle = handle
        self.store = store
        self.sink = sink
        self.trace_path = trace_path
        self.budget = budget
        self.cancel = cancel
        self._cancel_wait = cancel_waiter(cancel)
        self.bank = bank
        self.confirmation = confirmation
        self.validator = Validator(settings.tools)
        deferred = bank.store if isinstance(bank.store, DeferredRecords) else None
        self.deferred = deferred
        self.memory = SuccessMemory(store if deferred is None else deferred)
        self.executor = Executor(EffectLedger(handle.ledger_store()), sleep=settings.sleep)
        setpoint = task.complexity if task.complexity is not None else settings.control.setpoint
        self.control = TaskControl(settings.control, setpoint)
        self.control.restore(state.control)
        # Known causes (empty, 429, 5xx, timeout, stale) get the decision layer's rules
        # first; their advice reaches the model as a note, never as an action of its own.
        self.rules = HybridController(default_rules(), tolerance=0.0, clock=settings.wall_clock)
        self.records: list[StepRecord] = []
        self.result: RunResult | None = None
        self.pending = state.pending
        self.grammar_ok = True
        self.last_errors: dict[str, float] = {}
        self.step_retries: list[dict[str, Any]] = []  # this step's read retries (_io.execute)
        self.recent_faults: dict[str, int] = {}  # tool -> last step it had a passing fault
        self.fault_repeats: dict[str, int] = {}  # signature -> repeats let through after one
        self._started = settings.clock()
        self._elapsed_before = state.elapsed_s
        # Set by agent/_recover.py: the next step record says the task resumed here.
        self.resume_note: str | None = None
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
        remaining = self.deadline_s - self.elapsed()
        sleep = self.settings.sleep
        out[HaltReason.DEADLINE] = lambda: sleep(max(0.0, remaining))
        return out

    def loop_state(self) -> LoopState:
        s = self.state
        return LoopState(
            step=s.step,
            elapsed_s=self.elapsed(),
            tokens=s.budget.tokens_used,
            cost=s.budget.cost_used,
            model_calls=s.budget.model_calls,
            no_progress_steps=s.no_progress_steps,
            repeat_count=s.repeat_count,
            replan_count=s.replan_count,
            last_error=self.records[-1].error if self.records else None,
            f_est=self.control.f_est,
            protocol=self.control.protocol.value,
            phase=s.phase,
        )

    def stop_reason(self) -> HaltReason | None:
        """Any reason to end the run now (checked before and after every step)."""
        if self.cancel is not None and self.cancel.is_set():
            return HaltReason.CANCELLED
        if self.budget is not None and self.budget.exhausted:
            return HaltReason.BUDGET
        if self.elapsed() >= self.deadline_s:
            return HaltReason.DEADLINE
        return self.settings.stop(self.loop_state())

    async def guard(self, observation: Observation) -> list[str]:
        """The decision layer's rule for a known cause of a poor answer, as a note."""
        if observation.status is ObservationStatus.OK:
            self.rules.forget(observation.source)
            return []
        widened = any(
            e.tool == observation.source and e.observation.get("status") == "empty"
            for e in self.state.observations[:-1]
        )
        decision = await self.rules.decide([observation], {"query_widened": widened})
        if decision.rule is None:
            return []
        note = f"rule {decision.rule} -> {decision.action}: {decision.reason}"
        self.state.notes.append(note)
        return [note]

    # --- fields ---------------------------------------------------------------------------

    def refresh_fields(self) -> None:
        self.state.field_errors = {
            name: problems
            for name, problems in field_problems(
                self.task.required_fields, self.state.required_fields
            ).items()
            if name in self.state.required_fields and self.state.required_fields[name] is not None
        }

    def complete_count(self) -> int:
        problems = field_problems(self.task.required_fields, self.state.required_fields)
        return len(self.task.required_fields) - len(problems)

    def completion(self) -> float | None:
        if not self.task.required_fields:
            return None
        return self.complete_count() / len(self.task.required_fields)

    def phase_for_react(self) -> str:
        incomplete = field_problems(self.task.required_fields, self.state.required_fields)
        return "collecting" if incomplete else "committing"

    # --- closing a step ------------------------------------------------------------------

    async def save(self) -> None:
        """Save the task state by compare-and-set, with the hints that wait for it."""
        waiting = [] if self.deferred is None else self.deferred.drain()
        try:
            await self.handle.save(self.state, waiting)
        except BaseException:
            if self.deferred is not None:
                self.deferred.requeue(waiting)
            raise

    async def close_step(
        self,
        *,
        step_type: str,
        error: float,
        u_used: float,
        settings: ActuatorSettings,
        usage: RunUsageSummary,
        model_u: float | None = None,
        action: ActionCall | None = None,
        final_answer: str | None = None,
        validation_errors: Sequence[str] = (),
        observation: dict[str, Any] | None = None,
        notes: Sequence[str] = (),
        progress: bool = False,
        halt: HaltReason | None = None,
        strict: bool = False,
        phase: str | None = None,
        measured: bool = True,
        retries: Sequence[Mapping[str, Any]] = (),
    ) -> StepRecord:
        """Update the controllers and the state, persist it, record the step, check the end.

        ``measured=False`` for steps that measured nothing (a call cut off by the deadline,
        a freeze for a human): controllers, estimator and monitors stay as they were.
        """
        state = self.state
        e = min(1.0, max(0.0, error))
        if measured:
            u, components = await self.bank.update(step_type, e)
            self.last_errors[step_type] = e
            reading = self.control.observe(u_used, 1.0 - e, self.completion())
            f_est, protocol, quality = reading.f_est, reading.protocol, reading.quality
            lyapunov: LyapunovVerdict | None = reading.verdict
        else:
            u = await self.bank.output(step_type)
            components = (await self.bank.ensure(step_type)).components
            if self.records:  # nothing new was measured: the signals hold their last values
                e, quality = self.records[-1].error, self.records[-1].quality
            else:
                quality = 1.0 - e
            f_est, protocol = self.control.f_est, self.control.protocol
            lyapunov = self.control.steps.last
        state.no_progress_steps = 0 if progress else state.no_progress_steps + 1
        state.step += 1
        state.elapsed_s = self.elapsed()
        state.control = self.control.snapshot()
        state.failures = state.failures[-20:]
        if halt is None:
            halt = self.stop_reason()
        actuators = {
            **settings.as_dict(),
            "model": self.settings.model.name,
            "tool_calling": "native" if self.settings.native else "json",
            "constrained_decoding": strict,
        }
        if model_u is not None:
            actuators["model_u"] = model_u
        record = StepRecord(
            run_id=state.run_id,
            task_id=state.task_id,
            step=state.step - 1,
            t_s=state.elapsed_s,
            phase=phase or state.phase,
            mode=self.settings.mode,
            step_type=step_type,
            action=action,
            final_answer=final_answer,
            validation_errors=list(validation_errors),
            observation=observation,
            error=e,
            control=u,
            pid_components=components,
            quality=quality,
            f_est=f_est,
            protocol=protocol.value,
            actuators=actuators,
            lyapunov_v=None if lyapunov is None else lyapunov.V,
            lyapunov_dv=None if lyapunov is None else lyapunov.dV,
            repeat_count=state.repeat_count,
            retries=[dict(r) for r in retries],
            notes=list(notes) if self.resume_note is None else [self.resume_note, *notes],
            usage=usage,
            halt=halt,
        )
        self.resume_note = None
        self.records.append(record)
        await self.sink.write(record)
        if halt is None:
            await self.save()
        else:
            await self.finish(halt, answer=final_answer if halt is HaltReason.FINAL else None)
        return record

    async def finish(
        self, halt: HaltReason, *, answer: str | None = None, message: str = ""
    ) -> RunResult:
        """End the run: persist the final state, close the trace, build the result."""
        state = self.state
        state.halt = halt.value
        state.elapsed_s = self.elapsed()
        if (
            halt is HaltReason.HANDOVER
            and state.handover_id is not None
            and state.status == "frozen"
        ):
            pass  # a frozen task stays resumable
        else:
            state.status = "done"
        complete = not field_problems(self.task.required_fields, state.required_fields)
        success = halt is HaltReason.FINAL and complete
        if answer is not None:
            state.answer = answer
        try:
            await self.save()
        except StateError as exc:  # e.g. another writer won the CAS: still close the trace
            message = f"{message or halt.value}; the final state was not saved ({exc})"
            if self.deferred is not None:
                await self.deferred.flush()
        b = state.budget
        run_usage = RunUsageSummary(
            model_calls=sum(r.usage.model_calls for r in self.records),
            prompt_tokens=sum(r.usage.prompt_tokens for r in self.records),
            completion_tokens=sum(r.usage.completion_tokens for r in self.records),
            cost=sum(r.usage.cost for r in self.records),
        )
        result = RunResult(
            run_id=state.run_id,
            task_id=state.task_id,
            halt_reason=halt,
            success=success,
            answer=state.answer if success else None,
            fields=dict(state.required_fields),
            steps=list(self.records),
            usage=run_usage,
            trace_path=self.trace_path,
            message=message or _message(halt, state, b.tokens_used),
            handover_id=state.handover_id if halt is HaltReason.HANDOVER else None,
        )
        self.result = result
        await self.sink.close(result)
        return result


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
        HaltReason.ERROR: "ended by an error",
    }
    return f"{texts[halt]} {done}"
