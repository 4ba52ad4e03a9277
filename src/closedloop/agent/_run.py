"""One run's state: what persists from one step to the next, its halt checks, its end.

A step (``_step.py``) reads the run and returns a ``StepRecord`` and the ``Actuators`` the
next step acts on; :meth:`Run.fold` takes both in and saves the task state by
compare-and-set, or ends the run on the record's halt (:meth:`Run.finish`). Everything a
step needs only while it runs stays in the values its stages return.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .._exceptions import StateError
from ..decision import Decision, HybridController, default_rules
from ..execution import Confirmation, EffectLedger, Executor
from ..execution._secret import RunSecrets
from ..feedback import StateStore
from ..perception import Observation, ObservationStatus
from ._actuators import Actuators, Controllers
from ._control import ControllerBank, TaskControl
from ._deferred import DeferredRecords
from ._health import ToolHealth
from ._inflight import Budget, Deadline, cancel_waiter
from ._io import ModelPort, ToolPort
from ._protocols import SuccessMemory, same_value
from ._records import ActionCall, HaltReason, RunResult, RunUsageSummary, StepRecord
from ._settings import LoopSettings
from ._state import StateHandle, Task, TaskState, field_problems
from ._stop import LoopState
from ._tools import Tool
from ._trace import TraceSink
from ._validate import Validator

__all__ = ["LoopSettings", "RuleAdvice", "Run"]  # LoopSettings is re-exported from _settings.py


@dataclass(frozen=True, slots=True)
class RuleAdvice:
    """A rule's decision on the last call's failed answer, for the next step's gate."""

    decision: Decision
    call: ActionCall


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
        self.actuators = Actuators()  # the settings each key acts on; a step hands them on
        # A human's approval covers the one frozen action only (taken by its execution).
        self.confirmation = confirmation
        # The run's secrets: declared ones, and those found in its text (values held here only).
        self.secrets = secrets if secrets is not None else RunSecrets(settings.secrets)
        self.validator = Validator(settings.tools)
        deferred = bank.store if isinstance(bank.store, DeferredRecords) else None
        self.deferred = deferred
        self.memory = SuccessMemory(store if deferred is None else deferred)
        # The two doors to the outside: every model call and every tool call goes through one.
        self.model_io = ModelPort(self)
        # The ledger's owner is the run's session: a recovery of this run resolves its own
        # claims, another run's live claim on the same key is waited for.
        ledger = EffectLedger(
            handle.ledger_store(), owner=handle.session_id, clock=settings.wall_clock
        )
        executor = Executor(ledger, sleep=settings.sleep, clock=settings.clock)
        self.tool_io = ToolPort(self, executor)
        setpoint = task.complexity if task.complexity is not None else settings.control.setpoint
        self.control = TaskControl(settings.control, setpoint)
        self.control.restore(state.control)
        # Known causes (empty, 429, 5xx, timeout, stale) get the decision layer's rules
        # first; their advice reaches the model as a note, never as an action of its own.
        self.rules = HybridController(default_rules(), tolerance=0.0, clock=settings.wall_clock)
        self.advice: RuleAdvice | None = None  # the last failed call's rule, for the gate
        self.records: list[StepRecord] = []
        self.result: RunResult | None = None
        self.last_errors: dict[str, float] = {}  # key -> its last measured error
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
        out[HaltReason.DEADLINE] = Deadline(self.deadline_s - self.elapsed(), self.settings.sleep)
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

    async def guard(self, observation: Observation, call: ActionCall) -> list[str]:
        """The decision layer's rule for a known cause of a poor answer, as a note (and,
        under a rule gate, as the next step's candidate action)."""
        self.advice = None
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
        self.advice = RuleAdvice(decision, call)
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

    def take_fields(self, fields: Mapping[str, Any]) -> tuple[dict[str, list[str]], bool]:
        """Take the required fields a final answer gives; a field reserved for a tool
        (``RequiredField.source``) must equal that tool's observed value. Returns what is
        still wrong per field, and whether the task came closer to complete."""
        state = self.state
        specs = {f.name: f for f in self.task.required_fields}
        given = {k: v for k, v in fields.items() if k in specs}
        sourced: dict[str, list[str]] = {}
        for name in list(given):
            source = specs[name].source
            if source is not None and not same_value(given[name], state.required_fields.get(name)):
                sourced[name] = [f"must come from {source}'s answer, not from the model"]
                del given[name]
        before = self.complete_count()
        merged = {**state.required_fields, **given}
        problems = {**field_problems(self.task.required_fields, merged), **sourced}
        for name, value in given.items():
            if name not in problems:
                state.required_fields[name] = value
        self.refresh_fields()
        return problems, self.complete_count() > before

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

    # --- folding a step in ------------------------------------------------------------------

    async def save(self) -> None:
        """Save the task state by compare-and-set, with the hints that wait for it."""
        waiting = [] if self.deferred is None else self.deferred.drain()
        try:
            await self.handle.save(self.state, waiting)
        except BaseException:
            if self.deferred is not None:
                self.deferred.requeue(waiting)
            raise

    def advance(self, progress: bool) -> None:
        """Count the step in the state (before its halt check reads the state)."""
        state = self.state
        state.no_progress_steps = 0 if progress else state.no_progress_steps + 1
        state.step += 1
        state.elapsed_s = self.elapsed()
        state.control = self.control.snapshot()
        state.failures = state.failures[-20:]

    async def fold(self, record: StepRecord, actuators: Actuators) -> None:
        """Take in what a step returned: its record, the settings the next step acts on;
        then save the state by compare-and-set, or end the run on the record's halt."""
        self.actuators = actuators
        self.resume_note = None
        self.records.append(record)
        await self.sink.write(record)
        if record.halt is None:
            await self.save()
        else:
            answer = record.final_answer if record.halt is HaltReason.FINAL else None
            await self.finish(record.halt, answer=answer)

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
        run_usage = RunUsageSummary.total(r.usage for r in self.records)
        result = RunResult(
            run_id=state.run_id,
            task_id=state.task_id,
            halt_reason=halt,
            success=success,
            answer=state.answer if success else None,
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
        HaltReason.ERROR: "ended by an error",
        HaltReason.SECRET_UNAVAILABLE: "a secret a tool call needs could not be resolved",
    }
    return f"{texts[halt]} {done}"
