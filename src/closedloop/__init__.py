"""closedloop: run LLM agents as closed-loop control systems.

The first agent is three concepts, a model, its tools and a task::

    from closedloop import Agent, tool

    @tool
    def get_weather(city: str) -> dict:
        '''The current weather in a city.'''
        ...

    result = Agent("local:qwen2.5-coder-0.5b", tools=[get_weather]).run_sync("Paris?")
    result.output, result.halt_reason

Under it: observe -> measure error -> controller -> actuate -> act -> observe. The
subpackages mirror that loop: ``closedloop.control`` (controllers, observers,
schedules), ``closedloop.perception``, ``closedloop.decision``, ``closedloop.execution``,
``closedloop.feedback``, ``closedloop.agent``, with ``closedloop.models`` at the edge.
The top level holds the first agent's names and every exception.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._exceptions import *  # noqa: F403
from ._exceptions import __all__ as _exceptions_all

if TYPE_CHECKING:
    from .agent import (  # noqa: F401 - re-exported lazily by __getattr__ below
        Agent,
        AgentResult,
        HaltReason,
        ModelSettings,
        RunLimits,
        RunResult,
        run_agent,
        stop_after_delay,
        stop_after_steps,
        stop_on_budget,
        stop_on_no_progress,
        stop_on_repeats,
        tool,
    )

__version__ = "0.1.0"

_agent_all = [
    "Agent",
    "AgentResult",
    "HaltReason",
    "ModelSettings",
    "RunLimits",
    "RunResult",
    "run_agent",
    "stop_after_delay",
    "stop_after_steps",
    "stop_on_budget",
    "stop_on_no_progress",
    "stop_on_repeats",
    "tool",
]

__all__ = sorted(["__version__", *_exceptions_all, *_agent_all])


def __getattr__(name: str) -> Any:
    # The loop's names load on first use: ``import closedloop`` (and the CLI) stays light.
    if name in _agent_all:
        from . import agent

        return getattr(agent, name)
    raise AttributeError(f"module 'closedloop' has no attribute {name!r}")
