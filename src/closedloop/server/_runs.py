"""Runs inside sessions: started as asyncio tasks, recorded in the store, resumed after a human.

A run's record (see ``_run_records``: namespace ``runs``, key ``<session id>/<run id>``,
in the key's scoped store) is the source of truth for its status: every worker can read
it, and a decision on a handover rebuilds the agent from the registry and resumes the
frozen task from the store, so nothing but the executing task itself lives in this process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import shutil
import socket
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from .._exceptions import ConfigurationError, ReconciliationRequiredError
from .._redaction import redact
from ..agent import Agent, HaltReason, JsonlTrace, MultiSink, RunResult
from ..feedback import Record, StateStore
from ..models import MeteredModel, Model
from ._dispatch import RunQueue
from ._local_runs import LocalRuns, _Local
from ._metrics import ServiceMetrics
from ._registry import AgentContext, AgentRegistry
from ._run_exec import _HubSink, drive, result_changes, sink_agent_name
from ._run_records import (
    RUNS,
    delete_run_state,
    first_run,
    handover_pending,
    hold_idempotency_key,
    new_run_record,
    request_fingerprint,
    run_key,
    store_scope,
    update_run,
)
from ._sse import RunHub, TraceTail
from ._takeover import hand_over_pending_effect, next_move
from ._workers import idempotent_task_id

__all__ = [
    "SETTLED",
    "RunManager",
]

SETTLED = ("waiting", "ended", "error")
"""What :meth:`RunManager.continue_run` answers when it executes nothing: the run waits on
a person, had ended, or could not be rebuilt (its record says why)."""

_log = logging.getLogger("closedloop.server")


class RunManager(LocalRuns):
    """Starts, resumes, cancels and records runs; one per app."""

    def __init__(
        self,
        *,
        registry: AgentRegistry,
        model: Callable[[], Model],
        hub: RunHub,
        metrics: ServiceMetrics,
        runs_dir: Callable[[], Path],
        world_url: str | None = None,
        tool_transport: Any = None,
        clock: Callable[[], float] = time.perf_counter,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.registry = registry
        self._model = model
        self.hub = hub
        self.metrics = metrics
        self._runs_dir = runs_dir
        self.world_url = world_url
        self.tool_transport = tool_transport  # the tools' gate (an httpx transport) or None
        self._clock = clock
        self._wall = wall_clock
        super().__init__()
        self.queue: RunQueue | None = None  # set when runs are dispatched through a queue

    def __repr__(self) -> str:
        return f"RunManager(local_runs={len(self._local)})"

    def trace_path(self, run_id: str) -> Path:
        """Where a run's trace goes (``closedloop trace show RUN_ID`` finds it there too)."""
        return self._runs_dir() / run_id / "trace.jsonl"

    def _context(
        self, store: StateStore, session_id: str, run_id: str, params: Mapping[str, Any]
    ) -> tuple[AgentContext, MeteredModel, _HubSink]:
        metered = MeteredModel(self._model(), listener=self.metrics, clock=self._clock)
        hub_sink = _HubSink(
            self.hub, f"{store_scope(store)}/{run_key(session_id, run_id)}", self.metrics
        )
        ctx = AgentContext(
            model=metered,
            store=store,
            session_id=session_id,
            run_id=run_id,
            params=dict(params),
            world_url=self.world_url,
            tool_transport=self.tool_transport,
            trace=MultiSink(JsonlTrace(self.trace_path(run_id)), hub_sink),
        )
        return ctx, metered, hub_sink

    # --- starting ---------------------------------------------------------------------

    async def start(
        self,
        store: StateStore,
        session_id: str,
        agent_name: str,
        text: str,
        params: Mapping[str, Any],
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        """Build the agent, record the run and start it; returns the run record (the first
        run's, for a repeated ``idempotency_key``: see :meth:`start_or_join`)."""
        record, _ = await self.start_or_join(
            store, session_id, agent_name, text, params, idempotency_key
        )
        return record

    async def start_or_join(
        self,
        store: StateStore,
        session_id: str,
        agent_name: str,
        text: str,
        params: Mapping[str, Any],
        idempotency_key: str | None = None,
    ) -> tuple[dict[str, Any], bool]:
        """Build the agent, record the run and start it; returns the run record and whether
        this call started it.

        ``ConfigurationError`` (unknown agent, a factory that refuses its params) comes
        back before anything is recorded. A repeated ``idempotency_key`` in one session is
        answered with the first run's record, also when the requests race, and starts no
        run; the same key with a different request raises ``IdempotencyKeyReusedError``.
        """
        fingerprint = ""
        if idempotency_key is not None:
            fingerprint = request_fingerprint(agent_name, text, params)
            first = await first_run(store, session_id, idempotency_key, fingerprint)
            if first is not None:  # a retry of a request that started its run
                return first, False
        run_id = "run_" + secrets.token_hex(8)
        task_id = (
            None if idempotency_key is None else idempotent_task_id(session_id, idempotency_key)
        )
        ctx, metered, hub_sink = self._context(store, session_id, run_id, params)
        try:
            agent = await self.registry.build(agent_name, ctx)
            task = self.registry.task_for(agent_name, text, ctx, agent, task_id)
        except BaseException:
            hub_sink.discard()
            raise
        hub_sink.agent = agent_name
        if idempotency_key is not None:
            # The build took a while: a request racing this one may hold the key by now.
            first = await first_run(store, session_id, idempotency_key, fingerprint)
            if first is not None:
                await self._unstart(store, None, agent, hub_sink)
                return first, False
        record = new_run_record(
            run_id=run_id,
            session_id=session_id,
            agent_name=agent_name,
            text=text,
            params=params,
            now=self._wall(),
            trace_path=str(self.trace_path(run_id)),
            task_id=task_id,
        )
        key = run_key(session_id, run_id)
        queued = self._dispatches()
        if queued:
            hub_sink.discard()  # the worker that reads the queue entry builds the run again
            record["worker"] = None  # none yet: the first worker to read the entry
        await store.record_put(RUNS, key, record, expected_version=0)
        if idempotency_key is not None:
            # The record first, then the key: a key always names a run that can be read.
            try:
                first = await hold_idempotency_key(
                    store, session_id, idempotency_key, fingerprint, run_id, self._wall()
                )
            except BaseException:
                await self._unstart(store, key, agent, hub_sink)
                raise
            if first is not None:  # another request with this key got there first
                await self._unstart(store, key, agent, hub_sink)
                return first, False
        if queued:  # recorded and its key held: now a worker may take it
            await self._enqueue(store, key, record, hub_sink)
            return record, True
        self._spawn(store, key, agent, task, ctx, metered, handover_id=None)
        self.metrics.runs_started.labels(agent_name, "start").inc()
        return record, True

    async def _unstart(
        self, store: StateStore, key: str | None, agent: Any, hub_sink: _HubSink
    ) -> None:
        """Take back a run that was built (and recorded under ``key``) but never spawned."""
        hub_sink.discard()
        if key is not None:
            await store.record_delete(RUNS, key)
        close = getattr(agent, "aclose", None)
        if not isinstance(agent, Agent) and callable(close):
            with contextlib.suppress(Exception):
                await close()

    async def resume(self, store: StateStore, run: Mapping[str, Any], handover_id: str) -> None:
        """Continue (or end) a run frozen at ``handover_id`` after the decision was recorded.

        The agent is built afresh from the registry (the task was frozen in the store, so
        this works in any process); the steps before the freeze seed the event channel so
        event numbers continue.
        """
        queued = {"status": "running", "handover_id": handover_id}
        if await self._requeue(store, run_key(str(run["session_id"]), str(run["id"])), queued):
            return
        key, agent, task, ctx, metered = await self._rebuild(store, run, agent_only=False)
        await self.update(store, key, {"status": "running", "handover_id": handover_id})
        self._spawn(store, key, agent, task, ctx, metered, handover_id=handover_id)
        self.metrics.runs_started.labels(str(run["agent"]), "resume").inc()

    async def release(self, store: StateStore, run: Mapping[str, Any]) -> None:
        """Continue a run from its task state once a person settled its pending effect."""
        key = run_key(str(run["session_id"]), str(run["id"]))
        changes = {"status": "running", "handover_id": None}
        if not await self._requeue(store, key, changes):
            await self.recover(store, await self.update(store, key, changes))

    # --- where a run executes: here (a queue overrides these) ---------------------------

    def _dispatches(self) -> bool:
        """Whether new runs go to a queue instead of executing here."""
        return False

    async def _enqueue(
        self, store: StateStore, key: str, record: dict[str, Any], hub_sink: _HubSink
    ) -> bool:
        """Hand a new, recorded run to a queue instead of executing it here (False: no
        queue)."""
        return False

    async def _requeue(self, store: StateStore, key: str, changes: Mapping[str, Any]) -> bool:
        """Hand a run that goes on to a queue with ``changes`` (False: no queue)."""
        return False

    def _fenced(self, local_key: str) -> bool:
        """Whether another worker took the run over (this one must not write its record)."""
        return False

    async def _finished(self, local_key: str) -> None:
        """The run's asyncio task ended here."""

    def executes_here(self, store: StateStore, key: str) -> bool:
        """Whether this process runs the asyncio task of run ``key``."""
        return f"{store_scope(store)}/{key}" in self._local

    async def recover(self, store: StateStore, run: Mapping[str, Any]) -> None:
        """Continue a ``running`` run whose worker died, in this process, from its task state.

        The agent is built afresh from the registry; ``Agent.recover`` reconciles the
        pending effects, takes the task over by compare-and-set (a worker that was only
        slow loses its next save) and redoes the step the task was in.
        """
        key, agent, task, ctx, metered = await self._rebuild(store, run, agent_only=True)
        await self.update(store, key, {"worker": os.getpid()})
        self._spawn(store, key, agent, task, ctx, metered, handover_id=None, recover=True)
        self.metrics.runs_started.labels(str(run["agent"]), "recover").inc()

    async def continue_run(
        self, store: StateStore, run: Mapping[str, Any], *, taken_over: bool
    ) -> str:
        """Execute, in this process, a ``running`` run whose worker stopped, from where its
        task state stands (:func:`next_move`): no state yet, it starts; a running state, it
        recovers (pending effects reconciled, the step redone); a frozen state whose handover
        was decided, it resumes. A run waiting on a person, or already ended, only has its
        record settled. Returns what was done: one of :data:`SETTLED`, or the move spawned.
        """
        key = run_key(str(run["session_id"]), str(run["id"]))
        move = await next_move(store, run)
        if move.how in SETTLED:
            await self.update(store, key, move.changes)
            return move.how
        recover, handover_id = move.how == "recover", move.handover_id
        try:
            key, agent, task, ctx, metered = await self._rebuild(store, run, agent_only=recover)
        except ConfigurationError as exc:
            message = redact(f"could not take the run over: {exc}")
            failed = {"status": "error", "halt_reason": "error", "success": False}
            await self.update(store, key, {**failed, "message": message})
            return "error"
        changes: dict[str, Any] = {"worker": os.getpid(), "host": socket.gethostname()}
        if taken_over:
            changes["takeovers"] = int(run.get("takeovers") or 0) + 1
            changes["taken_over_at"] = self._wall()
            changes["taken_from"] = run.get("worker")  # the worker that stopped
        await self.update(store, key, changes)
        self._spawn(store, key, agent, task, ctx, metered, handover_id=handover_id, recover=recover)
        self.metrics.runs_started.labels(str(run["agent"]), move.how).inc()
        return move.how

    async def _rebuild(
        self, store: StateStore, run: Mapping[str, Any], *, agent_only: bool
    ) -> tuple[str, Any, Any, AgentContext, MeteredModel]:
        """A stored run's agent and task, built afresh from the registry (so this works in
        any process), with its event channel seeded by the steps already traced so event
        numbers continue. ``agent_only``: refuse a runner (only an ``Agent`` recovers)."""
        session_id, run_id = str(run["session_id"]), str(run["id"])
        agent_name = str(run["agent"])
        key = run_key(session_id, run_id)
        # Seed the channel before the sink opens it.
        self.hub.open(f"{store_scope(store)}/{key}", await TraceTail(run.get("trace_path")).poll())
        ctx, metered, hub_sink = self._context(store, session_id, run_id, run.get("params") or {})
        hub_sink.agent = agent_name
        try:
            agent = await self.registry.build(agent_name, ctx)
            if agent_only and not isinstance(agent, Agent):
                raise ConfigurationError("agent", agent_name, "is a runner; only an Agent recovers")
            task = self.registry.task_for(
                agent_name, str(run["task"]), ctx, agent, run.get("task_id") or None
            )
        except BaseException:
            hub_sink.discard()
            raise
        return key, agent, task, ctx, metered

    def _spawn(
        self,
        store: StateStore,
        key: str,
        agent: Any,
        task: Any,
        ctx: AgentContext,
        metered: MeteredModel,
        *,
        handover_id: str | None,
        recover: bool = False,
    ) -> None:
        local_key = f"{store_scope(store)}/{key}"
        local = _Local(cancel=asyncio.Event(), agent_watches_cancel=isinstance(agent, Agent))
        coro = self._execute(
            store, key, local_key, agent, task, ctx, metered, local, handover_id, recover
        )
        local.task = asyncio.get_running_loop().create_task(coro, name=f"closedloop-run {key}")
        self._local[local_key] = local
        local.task.add_done_callback(lambda _: self._local.pop(local_key, None))

    async def _execute(
        self,
        store: StateStore,
        key: str,
        local_key: str,
        agent: Any,
        task: Any,
        ctx: AgentContext,
        metered: MeteredModel,
        local: _Local,
        handover_id: str | None,
        recover: bool = False,
    ) -> None:
        local.started = True
        sink = ctx.trace
        assert sink is not None
        run_id = ctx.run_id
        agent_name = sink_agent_name(sink)
        started = self._clock()
        self.metrics.runs_active.inc()
        try:
            try:
                if local.cancel.is_set() and not local.agent_watches_cancel:
                    raise asyncio.CancelledError  # stopped before it began (_Local.stop)
                result = await drive(agent, task, ctx, sink, local.cancel, handover_id, recover)
            except ReconciliationRequiredError as exc:
                if not recover:
                    raise
                await self._hand_over_pending(store, key, agent_name, task, str(exc))
                return
            finally:
                close = getattr(agent, "aclose", None)
                if not isinstance(agent, Agent) and callable(close):
                    with contextlib.suppress(Exception):
                        await close()
            if not self._fenced(local_key):
                await self._record_result(store, key, agent_name, result, metered, started)
        except asyncio.CancelledError:
            why = "cancelled on request" if local.cancel.is_set() else "server shutdown"
            if self._fenced(local_key):
                return  # the run is another worker's now: it writes the record
            with contextlib.suppress(Exception):
                await asyncio.shield(
                    self.update(
                        store,
                        key,
                        {
                            "status": "cancelled",
                            "halt_reason": "cancelled",
                            "success": False,
                            "message": why,
                        },
                        timing=(self._clock() - started, metered),
                    )
                )
            if not local.cancel.is_set():
                raise  # a shutdown: let it through
        except Exception as exc:
            message = redact(f"{type(exc).__name__}: {exc}")
            _log.warning("run %s ended by an error: %s", run_id, message)
            self.metrics.runs_finished.labels(agent_name, "error", "false").inc()
            if self._fenced(local_key):
                return  # the run is another worker's now: it writes the record
            with contextlib.suppress(Exception):
                await self.update(
                    store,
                    key,
                    {
                        "status": "error",
                        "halt_reason": "error",
                        "success": False,
                        "message": message,
                    },
                    timing=(self._clock() - started, metered),
                )
        finally:
            self.metrics.runs_active.dec()
            self.hub.close(local_key)
            await self._finished(local_key)

    async def _hand_over_pending(
        self, store: StateStore, key: str, agent_name: str, task: Any, reason: str
    ) -> None:
        """A pending effect nothing can settle: a handover item for a person to choose."""
        record = await store.record_get(RUNS, key)
        run = {} if record is None else record.to_dict()
        task_id = str(getattr(task, "task_id", None) or run.get("task_id") or run.get("id"))
        await self.update(store, key, await hand_over_pending_effect(store, run, task_id, reason))
        self.metrics.handovers.labels("created").inc()
        _log.info("run %s: pending effect handed over (%s)", key.split("/", 1)[1], agent_name)

    async def _record_result(
        self,
        store: StateStore,
        key: str,
        agent_name: str,
        result: RunResult,
        metered: MeteredModel,
        started: float,
    ) -> None:
        halt = result.halt_reason
        frozen = halt is HaltReason.HANDOVER and result.handover_id is not None
        rejected = frozen and not await handover_pending(store, result.handover_id)
        changes = result_changes(result, handed_over=frozen and not rejected)
        await self.update(store, key, changes, timing=(self._clock() - started, metered))
        if frozen and not rejected:
            self.metrics.handovers.labels("created").inc()
        else:
            self.metrics.runs_finished.labels(
                agent_name, halt.value, str(result.success).lower()
            ).inc()
        _log.info("run %s: %s (%s)", key.split("/", 1)[1], changes["status"], halt.value)

    # --- reading and changing records -------------------------------------------------

    async def update(
        self,
        store: StateStore,
        key: str,
        changes: Mapping[str, Any],
        *,
        timing: tuple[float, MeteredModel] | None = None,
    ) -> dict[str, Any]:
        """Merge ``changes`` into a run record by compare-and-set (retrying lost races)."""
        return await update_run(store, key, changes, now=self._wall, timing=timing)

    async def delete_run(self, store: StateStore, record: Record) -> None:
        """Remove a run's record, task state, ledger entries, handovers and trace."""
        run_id = await delete_run_state(store, record)
        if run_id:
            directory = self.trace_path(run_id).parent
            await asyncio.to_thread(shutil.rmtree, directory, True)
