"""The public face of the loop: ``Agent`` (``run_agent`` wraps it for one task).

An agent is three concepts: a model, its tools, and the task it is run on::

    agent = Agent(model, tools=[get_weather])
    result = agent.run_sync("What is the weather in Paris?")
    result.output  # the answer, typed by output_type (str by default)

Everything else is an option group with defaults (``_options.py``). Three ways to run,
each with a sync twin: ``run``/``run_sync`` run a task to a named halt,
``iter``/``iter_sync`` yield one typed ``StepRecord`` per step, and ``resume``/
``resume_sync`` continue a task that stopped before its halt: after a person's decision
on its handover (``resume(handover_id)``) or after its process died
(``resume(task_id=...)``).
Every exception inside a run ends it as ``error`` with the exception in the result;
only misuse before a run starts (a ``ConfigurationError``) raises.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import (
    Generator,
    Iterable,
    Mapping,
    Sequence,
)
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from .._exceptions import ConfigurationError
from ..execution._secret import RunSecrets
from ..feedback import HandoverStatus, MemoryStore, StateStore
from ..feedback._store import BaseStore
from ..models import Model, ModelLadder, load_model
from ._control import ControllerBank
from ._control_config import ControlConfig
from ._deferred import DeferredRecords
from ._driver import drive
from ._escalation import feed
from ._flatten import flatten
from ._fold import new_state
from ._halt_error import end_with_error
from ._health import ToolHealth
from ._inflight import Budget
from ._iterate import AgentRun
from ._moved import refuse_moved_keywords
from ._options import (
    ContextSettings,
    Mode,
    ModelSettings,
    RunLimits,
    Runtime,
    Trace,
    mode_of,
)
from ._output import OutputParser
from ._prewarm import trace_with_notes
from ._records import AgentResult, HaltReason, OutputT, RunResult, StepRecord
from ._recover import recover_run
from ._resume import apply_decision, frozen_task, spec_from_state
from ._run import Run
from ._state import StateHandle, Task, TaskState, new_id, required_fields_of
from ._tools import tools_by_name
from ._trace import JsonlTrace, TraceSink
from ._trace_files import run_dir
from ._twins import TypedRun, finished, no_running_loop, sync_twin
from ._view import Carry

__all__ = ["Agent"]

G = TypeVar("G")


class _NullSink:
    async def write(self, record: StepRecord) -> None:
        return None

    async def close(self, result: RunResult) -> None:
        return None


def _model(value: Model | str, name: str) -> Model:
    if isinstance(value, str):
        return load_model(value)
    if not isinstance(value, Model):
        raise ConfigurationError(name, value, "must be a Model or a model spec string")
    return value


class _Cancel(Protocol):
    """What ``cancel=`` accepts: an ``asyncio.Event``, a ``threading.Event`` or the like."""

    def is_set(self) -> bool: ...


def _group(name: str, value: Any, kind: type[G]) -> G:
    if value is None:
        return kind()
    if not isinstance(value, kind):
        raise ConfigurationError(name, value, f"must be a {kind.__name__} or None")
    return value


class Agent(Generic[OutputT]):
    """A model, its tools and the loop's settings, reusable across tasks.

    ``model`` is a ``Model`` or a spec string (``"local:qwen2.5-coder-0.5b"``), or a model
    ladder: a list of them, cheapest first, or a ``ModelLadder`` (with prices); each step
    proposes on the rung its control signal schedules (``ActuatorSettings.rung``). ``tools`` is a
    list (or name → tool map) of callables, ``@tool`` functions, ``AtomicAction``s,
    ``(openai_schema, executor)`` pairs or ``HttpTool``s. ``output_type`` types the
    result's ``output`` (default ``str``; anything pydantic validates, checked when the
    answer is accepted). ``instructions`` are added to the system prompt.

    The options, each a frozen value with defaults: ``mode`` (``ReAct()``,
    ``PlanExecute(...)``, ``PlanReview(...)`` or a mode's name), ``model_settings``
    (:class:`ModelSettings`), ``limits`` (:class:`RunLimits`: ``max_steps`` and
    ``deadline_s`` always apply, and its ``stop`` policy on top of them), ``context``
    (:class:`ContextSettings`), ``control`` (:class:`ControlConfig`: every gain and
    threshold, and how a faulty read is asked again) and ``runtime`` (:class:`Runtime`:
    the store, the trace, the secrets, clocks and sleep, injectable so tests never wait).
    """

    def __new__(cls, *_args: Any, **kwargs: Any) -> Agent[OutputT]:
        # Checked before __init__ so an old keyword is named with its new place; type
        # checkers read __init__'s signature, which rejects it statically as well.
        refuse_moved_keywords(kwargs)
        return super().__new__(cls)

    def __init__(
        self,
        model: Model | str | ModelLadder | Sequence[Model | str],
        tools: Iterable[Any] | Mapping[str, Any] = (),
        *,
        output_type: type[OutputT] = str,  # type: ignore[assignment]  # OutputT defaults to str
        instructions: str = "",
        mode: Mode | str = "react",
        model_settings: ModelSettings | None = None,
        limits: RunLimits | None = None,
        context: ContextSettings | None = None,
        control: ControlConfig | None = None,
        runtime: Runtime | None = None,
    ) -> None:
        self.mode = mode_of(mode)
        self.model_settings = _group("model_settings", model_settings, ModelSettings)
        self.limits = _group("limits", limits, RunLimits)
        self.context = _group("context", context, ContextSettings)
        self.runtime = rt = _group("runtime", runtime, Runtime)
        self.control = _group("control", control, ControlConfig)
        self.secrets = RunSecrets(rt.secrets).declared  # checked: Secrets, each name once
        if not isinstance(instructions, str):
            raise ConfigurationError("instructions", instructions, "must be a string")
        self.output_type = output_type
        self._output = OutputParser(output_type)
        self._result_type: type[AgentResult[OutputT]] = AgentResult[output_type]  # type: ignore[valid-type]  # a runtime type
        # A list of models is a ladder (cheapest first): the agent's model is its rung 0.
        if isinstance(model, Model | str):
            ladder, self.model = None, _model(model, "model")
        else:
            ladder = ModelLadder.of(model)
            self.model = ladder.rungs[0].model
        self.tools = tools_by_name(tools)
        self.store: StateStore = rt.store if rt.store is not None else MemoryStore()
        self.required_fields = required_fields_of(self.context.required_fields)
        self.trace = rt.trace
        self.trace_dir = None if rt.trace_dir is None else Path(rt.trace_dir)
        self.settings = flatten(
            self.model,
            self.tools,
            self.mode,
            (self.model_settings, self.limits, self.context, self.control, rt),
            instructions="\n".join(
                t for t in (instructions, RunSecrets(self.secrets).prompt_note()) if t
            ),
            ladder=ladder,
            secrets=self.secrets,
            format_answer=self._output.checked(self.context.format_answer),
            verifier=None
            if self.model_settings.verifier is None
            else _model(self.model_settings.verifier, "verifier"),
        )
        # The PID history and the success memory are hints: they ride along with each
        # step's state save rather than costing a durable commit each (see _deferred.py).
        # Where the store's class writes a save and its records in one transaction
        # (``put_with_records``: SQLite, Redis and memory, where each write is a turn of the
        # event loop).
        bank_store: StateStore = self.store
        together = getattr(type(self.store), "put_with_records", None)
        if together is not None and together is not BaseStore.put_with_records:
            names = (self.settings.control.namespace, "successes")
            bank_store = DeferredRecords(self.store, names)
        self._bank = ControllerBank(self.settings.control, bank_store)
        health = self.settings.control.health
        # Tool health outlives a run: a service found down stays down for the next one.
        self._health = None if health is None else ToolHealth(health, self.settings.clock)

    def __repr__(self) -> str:
        return (
            f"Agent(model={self.model.name!r}, tools={list(self.tools)}, "
            f"mode={self.settings.mode!r})"
        )

    # --- set-up ---------------------------------------------------------------------------

    def _sink(self, run_id: str, trace: Any) -> tuple[TraceSink, str | None]:
        sink, path = self._chosen_sink(run_id, trace)
        warning = self.settings.control.gain_warning
        # A gain table that was missing, stale or out of range fell back to the fixed gains:
        # the trace says so, or nobody would know the table did not apply.
        return (sink if warning is None else trace_with_notes(sink, [warning])), path

    def _chosen_sink(self, run_id: str, trace: Any) -> tuple[TraceSink, str | None]:
        chosen = self.trace if trace is None else trace
        if chosen is False:
            return _NullSink(), None
        if chosen is None or chosen is True:
            path = (
                run_dir(run_id) / "trace.jsonl"
                if self.trace_dir is None
                else self.trace_dir / run_id / "trace.jsonl"
            )
            return JsonlTrace(path), str(path)
        if isinstance(chosen, str | os.PathLike):
            return JsonlTrace(chosen), os.fspath(chosen)
        if isinstance(chosen, TraceSink):
            where = getattr(chosen, "path", None)
            return chosen, None if where is None else str(where)
        raise ConfigurationError(
            "trace", chosen, "must be a TraceSink, a path, True, False or None"
        )

    def _task(self, task: str | Task) -> Task:
        if isinstance(task, Task):
            return task
        return Task(prompt=task, required_fields=self.required_fields)

    async def _start(
        self,
        task: str | Task,
        *,
        budget: Any,
        cancel: Any,
        session_id: str | None,
        trace: Any,
    ) -> tuple[Run, Carry]:
        spec = self._task(task)
        task_id = spec.task_id or new_id("task")
        run_id = new_id("run")
        session = session_id or task_id
        # A secret in the task's text becomes a reference before the state exists: the model,
        # the store and the trace see the reference, a tool call that uses it the value.
        secrets = RunSecrets(self.secrets)
        state = new_state(
            spec,
            task_id=task_id,
            run_id=run_id,
            session_id=session,
            prompt=secrets.adopt_text(spec.prompt),
            mode=self.settings.mode,
        )
        handle = StateHandle(self.store, session)
        failure: Exception | None = None
        try:
            await handle.create(state)
        except ConfigurationError:
            raise ConfigurationError(
                "session_id", session, "already holds a task; resume it or pick another id"
            ) from None
        except Exception as exc:  # the store failed before the first step: a recorded end too
            failure = exc
        run = self._new_run(
            spec,
            state,
            handle,
            budget=Budget.of(budget),
            cancel=cancel,
            trace=trace,
            secrets=secrets,
        )
        if failure is not None:
            await end_with_error(run, failure)
            return run, Carry()
        run.refresh_fields()
        return run, Carry()

    # --- running ----------------------------------------------------------------------------

    def _budget(self, budget: Budget | None) -> Budget | None:
        if budget is not None:
            return Budget.of(budget)
        limits = self.limits
        if limits.tokens is None and limits.cost is None:
            return None
        return Budget(tokens=limits.tokens, cost=limits.cost)  # a fresh account per run

    def iter(
        self,
        task: str | Task,
        *,
        budget: Budget | None = None,
        cancel: _Cancel | None = None,
        session_id: str | None = None,
        trace: Trace = None,
    ) -> AgentRun:
        """Step through a run: ``async for record in agent.iter(task): ...``.

        Its ``result`` is the typed :class:`AgentResult` once the run has ended.
        """
        return TypedRun(
            lambda: self._start(
                task,
                budget=self._budget(budget),
                cancel=cancel,
                session_id=session_id,
                trace=trace,
            ),
            self._typed,
        )

    async def run(
        self,
        task: str | Task,
        *,
        budget: Budget | None = None,
        cancel: _Cancel | None = None,
        session_id: str | None = None,
        trace: Trace = None,
    ) -> AgentResult[OutputT]:
        """Run ``task`` to its halt and return the typed result.

        ``budget`` is a live account (shared between runs if you pass the same one; default:
        a fresh one from ``limits.tokens``/``limits.cost``, if set), ``cancel`` an event that
        ends the run as ``cancelled`` when set, ``session_id`` the store key of the task
        (default: its task id), ``trace`` this run's trace instead of the agent's.
        """
        run = self.iter(task, budget=budget, cancel=cancel, session_id=session_id, trace=trace)
        async for _ in run:
            pass
        return self._typed(finished(run.result))

    async def resume(
        self,
        handover_id: str | None = None,
        *,
        task_id: str | None = None,
        task: str | Task | None = None,
        budget: Budget | None = None,
        cancel: _Cancel | None = None,
        trace: Trace = None,
    ) -> AgentResult[OutputT]:
        """Continue a task that stopped before its halt, from its state in the store.

        ``handover_id``: after a person's decision on that handover. Approve: the frozen
        action runs as it was (confirmed, if it needed a confirmation). Edit: ``arguments``
        patches the frozen action, ``fields`` sets required fields, ``note`` is shown to the
        model, other keys replace task-state fields. Reject: the run ends with ``handover``
        and no success.

        ``task_id`` instead: after the process running it died. It is the task's session id
        (its task id unless a ``session_id`` was given). Pending effects are reconciled
        first; the step the task was in is then redone, and a committed effect is replayed
        from the ledger, never run again; the first step record after the recovery says so
        in its notes (``_recover.py``).

        Pass ``task`` to keep code checks of required fields (their JSON schemas are
        restored from the state anyway).
        """
        account = self._budget(budget)
        if handover_id is not None and task_id is None:
            run, carry = await self._resume_run(handover_id, task, account, cancel, trace)
        elif task_id is not None and handover_id is None:
            run, carry = await recover_run(
                self.settings,
                self.store,
                task_id,
                task=None if task is None else self._task(task),
                new_run=lambda spec, state, handle: self._new_run(
                    spec, state, handle, budget=account, cancel=cancel, trace=trace
                ),
            )
        else:
            raise ConfigurationError(
                "resume", (handover_id, task_id), "give exactly one of handover_id and task_id"
            )
        return await self._finish(run, carry)

    async def _finish(self, run: Run, carry: Carry) -> AgentResult[OutputT]:
        """Drive ``run`` to its halt (if it has not halted already) and type its result."""
        if run.result is None:
            async for _ in drive(run, carry):
                pass
        return self._typed(finished(run.result))

    def _new_run(
        self,
        spec: Task,
        state: TaskState,
        handle: StateHandle,
        *,
        budget: Budget | None,
        cancel: Any,
        trace: Any,
        secrets: RunSecrets | None = None,
    ) -> Run:
        """The one way a run is built: a fresh task, a resumed one or a recovered one."""
        sink, path = self._sink(state.run_id, trace)
        return Run(
            self.settings,
            spec,
            state,
            handle=handle,
            store=self.store,
            sink=sink,
            trace_path=path,
            budget=budget,
            cancel=cancel,
            bank=self._bank,
            health=self._health,
            secrets=secrets if secrets is not None else RunSecrets(self.secrets),
        )

    def _typed(self, result: RunResult) -> AgentResult[OutputT]:
        """The run's result with ``output`` parsed into ``output_type``."""
        return self._output.result(result, self._result_type)

    async def _resume_run(
        self, handover_id: str, task: str | Task | None, budget: Any, cancel: Any, trace: Any
    ) -> tuple[Run, Carry]:
        item, handle, state = await frozen_task(self.store, handover_id)
        spec = self._task(task) if task is not None else spec_from_state(state)
        confirmation = apply_decision(item, state)
        run = self._new_run(spec, state, handle, budget=budget, cancel=cancel, trace=trace)
        if item.status is HandoverStatus.REJECTED:
            who = item.decided_by or "a reviewer"
            why = f"rejected by {who}" + (f": {item.note}" if item.note else "")
            await run.finish(HaltReason.HANDOVER, message=why)
        else:
            run.control.reset_protocol()  # a person absorbed the disturbance: estimate afresh
            run.refresh_fields()
        return run, Carry(confirmation=confirmation)

    async def feedback(
        self, result: RunResult | Sequence[StepRecord], *, ok: bool
    ) -> dict[str, float]:
        """Tell the risk controller how a run turned out (``ok``: its answer was right).

        Each call the run accepted without escalating becomes one outcome of its tool's
        acceptance threshold (``ControlConfig.sampling.risk``), kept in the agent's store
        so it carries across runs, sessions and workers. ``result`` is the run's result or
        its step records (a trace read back). Returns the new thresholds by
        ``<scope>/<tool>``; empty when the run accepted no call.
        """
        risk = self.settings.control.sampling.risk
        if risk is None:
            raise ConfigurationError(
                "control.sampling.risk", None, "feedback needs Sampling(risk=RiskControl(...))"
            )
        steps = result.steps if isinstance(result, RunResult) else list(result)
        return await feed(self.store, risk, steps, ok)

    # --- sync twins ---------------------------------------------------------------------------

    run_sync = sync_twin(run)
    feedback_sync = sync_twin(feedback)
    resume_sync = sync_twin(resume)

    def iter_sync(
        self,
        task: str | Task,
        *,
        budget: Budget | None = None,
        cancel: _Cancel | None = None,
        session_id: str | None = None,
        trace: Trace = None,
    ) -> Generator[StepRecord, None, AgentResult[OutputT]]:
        """Step through a run from sync code; the generator returns the typed result."""
        no_running_loop("iter_sync")
        loop = asyncio.new_event_loop()
        run = self.iter(task, budget=budget, cancel=cancel, session_id=session_id, trace=trace)
        try:
            while True:
                try:
                    yield loop.run_until_complete(run.__anext__())
                except StopAsyncIteration:
                    return self._typed(finished(run.result))
        finally:
            loop.run_until_complete(run.aclose())
            loop.close()
