"""One run's execution: its trace sink, driving the agent, and the record its result becomes.

``RunManager`` (``_runs.py``) decides where and when a run executes; these are the parts
of one execution that do not depend on that: the sink that publishes each step to the
run's channel, the call that runs, resumes or recovers the agent, and the changes a
finished run writes into its record.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from .._redaction import redact
from ..agent import Agent, HaltReason, RunResult, StepRecord, TraceSink
from ._metrics import ServiceMetrics
from ._registry import AgentContext
from ._run_records import agent_session
from ._sse import RunHub, step_event

__all__ = ["RAISED_HALTS", "drive", "result_changes", "sink_agent_name"]

RAISED_HALTS = frozenset(
    {
        HaltReason.ERROR,
        HaltReason.SECRET_UNAVAILABLE,
        HaltReason.MODEL_UNAVAILABLE,
        HaltReason.MODEL_UNREACHABLE,
    }
)
"""Halts that something raised inside the run: its record's status is ``error``."""


class _HubSink:
    """Publishes each step to the run's channel and counts it in the metrics."""

    def __init__(self, hub: RunHub, key: str, metrics: ServiceMetrics) -> None:
        self.hub = hub
        self.key = key
        self.channel = hub.open(key)
        self.agent = ""
        self.metrics = metrics

    def discard(self) -> None:
        """The run never started: drop its channel."""
        self.hub.close(self.key)

    async def write(self, record: StepRecord) -> None:
        self.metrics.step(self.agent, record)
        self.channel.publish(step_event(record))

    async def close(self, result: RunResult) -> None:
        return None


@dataclass
class _Local:
    """A run executing in this process: its task, and the event that asks it to stop."""

    cancel: asyncio.Event
    agent_watches_cancel: bool = True
    task: asyncio.Task[None] = field(init=False)


async def drive(
    agent: Any,
    task: Any,
    ctx: AgentContext,
    sink: TraceSink,
    cancel: asyncio.Event,
    handover_id: str | None,
    recover: bool = False,
) -> RunResult:
    """Run, resume or recover ``agent`` on ``task``: an ``Agent`` with the cancel event and
    the trace, a runner through its own ``run`` and ``resume``."""
    session = agent_session(ctx.session_id, ctx.run_id)
    if isinstance(agent, Agent):
        if recover:
            return await agent.resume(task_id=session, task=task, trace=sink, cancel=cancel)
        if handover_id is None:
            return await agent.run(task, session_id=session, trace=sink, cancel=cancel)
        return await agent.resume(handover_id, task=task, trace=sink, cancel=cancel)
    result: RunResult
    if handover_id is None:
        result = await agent.run(task, session_id=session)
    else:
        result = await agent.resume(handover_id, task)
    return result


def result_changes(result: RunResult, *, handed_over: bool) -> dict[str, Any]:
    """What a finished run writes into its record; ``handed_over``: it waits on a person."""
    halt = result.halt_reason
    status = "handover" if handed_over else "done"
    if halt is HaltReason.CANCELLED:
        status = "cancelled"
    elif halt in RAISED_HALTS:  # raised in the run
        status = "error"
    changes: dict[str, Any] = {
        "status": status,
        "halt_reason": halt.value,
        "success": result.success,
        "answer": redact(result.answer),
        "message": redact(result.message),
        "handover_id": result.handover_id,
        "agent_run_id": result.run_id,
        "fields": redact(result.fields),
    }
    if result.steps:
        changes["steps"] = result.steps[-1].step + 1
    return changes


def sink_agent_name(sink: Any) -> str:
    """The agent a run's trace sink counts its steps for (``unknown`` without a hub sink)."""
    for inner in getattr(sink, "sinks", ()):
        if isinstance(inner, _HubSink):
            return inner.agent
    return "unknown"
