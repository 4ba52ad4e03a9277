"""``run_agent`` and ``run_agent_async``: one task through a fresh ``Agent``, in one call.

For scripts and notebooks that do not keep an agent around; ``resume=handover_id``
continues a frozen task instead of starting one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .._exceptions import ConfigurationError
from ..feedback import StateStore
from ..models import Model
from ._agent import Agent, _run_sync
from ._inflight import Budget
from ._records import RunResult
from ._state import Task
from ._stop import StopFn, StopPolicy

__all__ = ["run_agent", "run_agent_async"]


async def run_agent_async(
    task: str | Task | None = None,
    *,
    model: Model | str,
    tools: Iterable[Any] | Mapping[str, Any] = (),
    mode: str = "react",
    max_steps: int = 12,
    deadline_s: float = 120.0,
    budget: Budget | int | dict[str, Any] | None = None,
    cancel: Any = None,
    stop: StopPolicy | StopFn | None = None,
    store: StateStore | None = None,
    session_id: str | None = None,
    resume: str | None = None,
    **options: Any,
) -> RunResult:
    """Run one task through a fresh :class:`Agent` (``options`` go to ``Agent``).

    ``resume=handover_id`` continues a frozen task instead (``store`` must be the one it
    froze in).
    """
    agent = Agent(
        model,
        tools,
        mode=mode,
        max_steps=max_steps,
        deadline_s=deadline_s,
        stop=stop,
        store=store,
        **options,
    )
    if resume is not None:
        return await agent.resume(resume, task=task, budget=budget, cancel=cancel)
    if task is None:
        raise ConfigurationError("task", None, "give a task (or resume=handover_id)")
    return await agent.run(task, budget=budget, cancel=cancel, session_id=session_id)


def run_agent(
    task: str | Task | None = None,
    *,
    model: Model | str,
    tools: Iterable[Any] | Mapping[str, Any] = (),
    mode: str = "react",
    max_steps: int = 12,
    deadline_s: float = 120.0,
    budget: Budget | int | dict[str, Any] | None = None,
    cancel: Any = None,
    stop: StopPolicy | StopFn | None = None,
    store: StateStore | None = None,
    session_id: str | None = None,
    resume: str | None = None,
    **options: Any,
) -> RunResult:
    """Run one task to its halt; the sync twin of :func:`run_agent_async`."""
    return _run_sync(
        run_agent_async(
            task,
            model=model,
            tools=tools,
            mode=mode,
            max_steps=max_steps,
            deadline_s=deadline_s,
            budget=budget,
            cancel=cancel,
            stop=stop,
            store=store,
            session_id=session_id,
            resume=resume,
            **options,
        )
    )
