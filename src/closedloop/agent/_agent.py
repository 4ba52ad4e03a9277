"""The public face of the loop: ``Agent`` (``run_agent`` wraps it for one task).

``await agent.run(task)`` runs a task to a named halt; ``agent.iter(task)`` yields one
typed ``StepRecord`` per step; ``await agent.resume(handover_id)`` continues a task a
human has decided on; ``await agent.recover(task_id)`` continues a task whose process
died. The ``_sync`` twins run their own event loop for scripts.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import (
    Awaitable,
    Callable,
    Coroutine,
    Iterable,
    Iterator,
    Mapping,
)
from pathlib import Path
from typing import Any, Literal

from .._exceptions import AgentError, ConfigurationError
from .._validation import require_int_at_least, require_positive
from ..feedback import HandoverStatus, MemoryStore, StateStore
from ..feedback._store import BaseStore
from ..models import Model, OpenAICompatible, load_model
from ._control import ControlConfig, ControllerBank
from ._deferred import DeferredRecords
from ._inflight import Budget
from ._iterate import AgentRun, drive
from ._modes import MODES
from ._prewarm import trace_with_notes
from ._projection import ProjectionOptions
from ._reads import ReadRetry
from ._records import HaltReason, RunResult, StepRecord
from ._recover import recover_run
from ._resume import apply_decision, frozen_task, spec_from_state
from ._review import ModelReviewer, Reviewer, code_reviewer
from ._run import LoopSettings, Run
from ._state import StateHandle, Task, TaskState, new_id, required_fields_of
from ._stop import (
    StopFn,
    StopPolicy,
    as_stop_policy,
    stop_after_steps,
    stop_on_no_progress,
    stop_on_repeats,
)
from ._tools import tools_by_name
from ._trace import JsonlTrace, TraceSink, run_dir

__all__ = ["Agent"]

ToolCalling = Literal["auto", "native", "json"]


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


class Agent:
    """A model, its tools and the loop's settings, reusable across tasks.

    ``model`` is a ``Model`` or a spec string (``"local:qwen2.5-coder-0.5b"``). ``tools`` is a
    list (or name → tool map) of callables, ``@tool`` functions, ``AtomicAction``s,
    ``(openai_schema, executor)`` pairs or ``HttpTool``s. ``mode`` is ``"react"``,
    ``"plan_execute"`` or ``"plan_review"``. Every run ends with a named halt: ``max_steps``
    and ``deadline_s`` always apply; ``stop`` adds a policy (default:
    ``stop_on_no_progress(no_progress) | stop_on_repeats(max_repeats)``). ``store`` keeps
    task state, the controllers' history and the handover queue (default: one
    ``MemoryStore`` per agent). ``control`` holds every gain and threshold.
    ``clock``/``wall_clock``/``sleep`` are injectable so tests never wait. ``read_retry``
    (a :class:`ReadRetry`) says how the loop asks a read again when it answers with a
    passing fault (5xx, timeout, 429) or a doubtful empty result.
    """

    def __init__(
        self,
        model: Model | str,
        tools: Iterable[Any] | Mapping[str, Any] = (),
        *,
        mode: str = "react",
        max_steps: int = 12,
        deadline_s: float = 120.0,
        stop: StopPolicy | StopFn | None = None,
        store: StateStore | None = None,
        control: ControlConfig | None = None,
        required_fields: Any = None,
        instructions: str = "",
        max_tokens: int = 512,
        temperature: float = 0.0,
        seed: int = 0,
        tool_calling: ToolCalling = "auto",
        verifier: Model | str | None = None,
        dual_temperature: float = 0.7,
        reviewer: Reviewer | ModelReviewer | None = None,
        max_replans: int = 2,
        max_plan_steps: int = 8,
        max_sendbacks: int = 2,
        no_progress: int = 3,
        max_repeats: int = 2,
        repeat_window: int = 8,
        observation_chars: int = 1500,
        keep_observations: int = 24,
        context_observations: int = 4,
        format_answer: Callable[[str, Mapping[str, Any]], str] | None = None,
        trace: TraceSink | str | os.PathLike[str] | Literal[False] | None = None,
        trace_dir: str | os.PathLike[str] | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        read_retry: ReadRetry | None = None,
    ) -> None:
        if mode not in MODES:
            raise ConfigurationError("mode", mode, f"must be one of {', '.join(MODES)}")
        if tool_calling not in ("auto", "native", "json"):
            raise ConfigurationError("tool_calling", tool_calling, "must be auto, native or json")
        self.model = _model(model, "model")
        self.tools = tools_by_name(tools)
        max_steps = require_int_at_least("max_steps", max_steps, 1)
        policy = stop_after_steps(max_steps)
        if stop is None:
            policy = (
                policy
                | stop_on_no_progress(require_int_at_least("no_progress", no_progress, 1))
                | stop_on_repeats(require_int_at_least("max_repeats", max_repeats, 1))
            )
        else:
            policy = policy | as_stop_policy(stop)
        native = tool_calling == "native" or (
            tool_calling == "auto"
            and (
                isinstance(self.model, OpenAICompatible)
                or bool(getattr(self.model, "supports_tool_calls", False))
            )
        )
        self.store: StateStore = store if store is not None else MemoryStore()
        self.required_fields = required_fields_of(required_fields)
        self.trace = trace
        self.trace_dir = None if trace_dir is None else Path(trace_dir)
        self.settings = LoopSettings(
            model=self.model,
            tools=self.tools,
            mode=mode,
            max_steps=max_steps,
            deadline_s=require_positive("deadline_s", deadline_s),
            stop=policy,
            control=control if control is not None else ControlConfig(),
            max_tokens=require_int_at_least("max_tokens", max_tokens, 1),
            temperature=temperature,
            seed=require_int_at_least("seed", seed, 0),
            native=native,
            verifier=None if verifier is None else _model(verifier, "verifier"),
            dual_temperature=dual_temperature,
            reviewer=reviewer if reviewer is not None else code_reviewer(),
            max_replans=require_int_at_least("max_replans", max_replans, 0),
            max_plan_steps=require_int_at_least("max_plan_steps", max_plan_steps, 1),
            max_sendbacks=require_int_at_least("max_sendbacks", max_sendbacks, 0),
            repeat_window=require_int_at_least("repeat_window", repeat_window, 1),
            observation_chars=require_int_at_least("observation_chars", observation_chars, 64),
            keep_observations=require_int_at_least("keep_observations", keep_observations, 1),
            projection=ProjectionOptions(
                observations=require_int_at_least("context_observations", context_observations, 0),
                instructions=instructions,
            ),
            format_answer=format_answer,
            clock=clock,
            wall_clock=wall_clock,
            sleep=sleep,
            read_retry=ReadRetry() if read_retry is None else read_retry,
        )
        # The PID history and the success memory are hints: they ride along with each
        # step's state save rather than costing a durable commit each (see _deferred.py).
        # Only where a commit costs something: a store whose class writes a save and its
        # records in one transaction (``put_with_records``); in memory it would only add work.
        bank_store: StateStore = self.store
        together = getattr(type(self.store), "put_with_records", None)
        if together is not None and together is not BaseStore.put_with_records:
            names = (self.settings.control.namespace, "successes")
            bank_store = DeferredRecords(self.store, names)
        self._bank = ControllerBank(self.settings.control, bank_store)

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
        if chosen is None:
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
        raise ConfigurationError("trace", chosen, "must be a TraceSink, a path, False or None")

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
    ) -> Run:
        spec = self._task(task)
        task_id = spec.task_id or new_id("task")
        run_id = new_id("run")
        session = session_id or task_id
        state = TaskState(
            task_id=task_id,
            run_id=run_id,
            session_id=session,
            prompt=spec.prompt,
            mode=self.settings.mode,
            phase="collecting" if self.settings.mode == "react" else "planning",
            required_fields={f.name: spec.context.get(f.name) for f in spec.required_fields},
            required_spec=[
                {
                    "name": f.name,
                    "description": f.description,
                    "schema": f.schema,
                    "source": f.source,
                }
                for f in spec.required_fields
            ],
            effect_ledger={"namespace": "ledger", "prefix": f"{task_id}/"},
        )
        handle = StateHandle(self.store, session)
        try:
            await handle.create(state)
        except ConfigurationError:
            raise ConfigurationError(
                "session_id", session, "already holds a task; resume it or pick another id"
            ) from None
        sink, path = self._sink(run_id, trace)
        run = Run(
            self.settings,
            spec,
            state,
            handle=handle,
            store=self.store,
            sink=sink,
            trace_path=path,
            budget=Budget.of(budget),
            cancel=cancel,
            bank=self._bank,
        )
        run.refresh_fields()
        return run

    # --- running ----------------------------------------------------------------------------

    def iter(
        self,
        task: str | Task,
        *,
        budget: Budget | int | dict[str, Any] | None = None,
        cancel: Any = None,
        session_id: str | None = None,
        trace: Any = None,
    ) -> AgentRun:
        """Step through a run: ``async for record in agent.iter(task): ...``."""
        return AgentRun(
            lambda: self._start(
                task, budget=budget, cancel=cancel, session_id=session_id, trace=trace
            )
        )

    async def run(
        self,
        task: str | Task,
        *,
        budget: Budget | int | dict[str, Any] | None = None,
        cancel: Any = None,
        session_id: str | None = None,
        trace: Any = None,
    ) -> RunResult:
        """Run ``task`` to its halt and return the result."""
        run = self.iter(task, budget=budget, cancel=cancel, session_id=session_id, trace=trace)
        async for _ in run:
            pass
        assert run.result is not None
        return run.result

    async def resume(
        self,
        handover_id: str,
        *,
        task: str | Task | None = None,
        budget: Budget | int | dict[str, Any] | None = None,
        cancel: Any = None,
        trace: Any = None,
    ) -> RunResult:
        """Continue a frozen task after a human decision on ``handover_id``.

        Approve: the frozen action runs as it was (confirmed, if it needed a confirmation).
        Edit: ``arguments`` patches the frozen action, ``fields`` sets required fields,
        ``note`` is shown to the model, other keys replace task-state fields. Reject: the
        run ends with ``handover`` and no success. Pass ``task`` to keep code checks of
        required fields (their JSON schemas are restored from the state anyway).
        """
        run = await self._resume_run(handover_id, task, budget, cancel, trace)
        if run.result is None:
            async for _ in drive(run):
                pass
        return _finished(run)

    async def recover(
        self,
        task_id: str,
        *,
        task: str | Task | None = None,
        budget: Budget | int | dict[str, Any] | None = None,
        cancel: Any = None,
        trace: Any = None,
    ) -> RunResult:
        """Continue a task whose process died mid-run, from its state in the store.

        ``task_id`` is the task's session id (its task id unless a ``session_id`` was
        given). Pending effects are reconciled first; the step the task was in is then
        redone, and a committed effect is replayed from the ledger, never run again. The
        first step record after the recovery says so in its notes. See ``_recover.py``.
        """
        run = await recover_run(
            self.settings,
            self.store,
            self._bank,
            task_id,
            task=None if task is None else self._task(task),
            sink_for=lambda run_id: self._sink(run_id, trace),
            budget=Budget.of(budget),
            cancel=cancel,
        )
        async for _ in drive(run):
            pass
        return _finished(run)

    async def _resume_run(
        self, handover_id: str, task: str | Task | None, budget: Any, cancel: Any, trace: Any
    ) -> Run:
        item, handle, state = await frozen_task(self.store, handover_id)
        spec = self._task(task) if task is not None else spec_from_state(state)
        confirmation = apply_decision(item, state)
        sink, path = self._sink(state.run_id, trace)
        run = Run(
            self.settings,
            spec,
            state,
            handle=handle,
            store=self.store,
            sink=sink,
            trace_path=path,
            budget=Budget.of(budget),
            cancel=cancel,
            bank=self._bank,
            confirmation=confirmation,
        )
        if item.status is HandoverStatus.REJECTED:
            who = item.decided_by or "a reviewer"
            why = f"rejected by {who}" + (f": {item.note}" if item.note else "")
            await run.finish(HaltReason.HANDOVER, message=why)
        else:
            run.control.reset_protocol()  # a person absorbed the disturbance: estimate afresh
            run.refresh_fields()
        return run

    # --- sync twins ---------------------------------------------------------------------------

    def run_sync(self, task: str | Task, **options: Any) -> RunResult:
        """:meth:`run` for code without an event loop."""
        return _run_sync(self.run(task, **options))

    def recover_sync(self, task_id: str, **options: Any) -> RunResult:
        """:meth:`recover` for code without an event loop."""
        return _run_sync(self.recover(task_id, **options))

    def resume_sync(self, handover_id: str, **options: Any) -> RunResult:
        """:meth:`resume` for code without an event loop."""
        return _run_sync(self.resume(handover_id, **options))

    def iter_sync(self, task: str | Task, **options: Any) -> Iterator[StepRecord]:
        """Step through a run from sync code; the generator returns the ``RunResult``."""
        loop = asyncio.new_event_loop()
        run = self.iter(task, **options)
        try:
            while True:
                try:
                    yield loop.run_until_complete(run.__anext__())
                except StopAsyncIteration:
                    return run.result  # type: ignore[return-value]
        finally:
            loop.run_until_complete(run.aclose())
            loop.close()


def _finished(run: Run) -> RunResult:
    if run.result is None:  # pragma: no cover - drive() always finishes the run
        raise AgentError("the run ended without a result")
    return run.result


def _run_sync(coro: Coroutine[Any, Any, RunResult]) -> RunResult:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    coro.close()
    raise ConfigurationError(
        "run_agent", "inside a running event loop", "use await run_agent_async(...) instead"
    )
