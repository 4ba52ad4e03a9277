"""``run_agent``: one task through a fresh ``Agent``, in one call.

For scripts and notebooks that do not keep an agent around. It is exactly
``Agent(model, tools, **options).run_sync(task)`` (or ``.resume_sync(handover_id)``);
code with an event loop builds the ``Agent`` and awaits ``run`` instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .._exceptions import ConfigurationError
from ..models import Model
from ._agent import Agent
from ._inflight import Budget
from ._records import AgentResult
from ._state import Task

__all__ = ["run_agent"]


def run_agent(
    task: str | Task | None = None,
    *,
    model: Model | str,
    tools: Iterable[Any] | Mapping[str, Any] = (),
    budget: Budget | None = None,
    session_id: str | None = None,
    resume: str | None = None,
    **options: Any,
) -> AgentResult[Any]:
    """Run one task to its halt through ``Agent(model, tools, **options)``.

    ``options`` are the agent's keywords (``mode``, ``limits``, ``runtime`` ...).
    ``resume=handover_id`` continues a frozen task instead (``Runtime(store=...)`` must be
    the store it froze in).
    """
    agent: Agent[Any] = Agent(model, tools, **options)
    if resume is not None:
        return agent.resume_sync(resume, task=task, budget=budget)
    if task is None:
        raise ConfigurationError("task", None, "give a task (or resume=handover_id)")
    return agent.run_sync(task, budget=budget, session_id=session_id)
