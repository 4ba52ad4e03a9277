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
The top level holds the first agent's names, ``Secret`` (a credential the tools get and
nothing else sees) and every exception.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._exceptions import *  # noqa: F403
from ._exceptions import __all__ as _exceptions_all

if TYPE_CHECKING:
    # ``X as X`` marks an explicit re-export, so type checkers accept
    # ``from closedloop import Agent`` (``__all__`` below is built at run time).
    from .agent import Agent as Agent
    from .agent import AgentResult as AgentResult
    from .agent import HaltReason as HaltReason
    from .agent import ModelSettings as ModelSettings
    from .agent import RunLimits as RunLimits
    from .agent import RunResult as RunResult
    from .agent import Runtime as Runtime
    from .agent import run_agent as run_agent
    from .agent import stop_after_delay as stop_after_delay
    from .agent import stop_after_steps as stop_after_steps
    from .agent import stop_on_budget as stop_on_budget
    from .agent import stop_on_no_progress as stop_on_no_progress
    from .agent import stop_on_repeats as stop_on_repeats
    from .agent import tool as tool
    from .execution import Secret as Secret
    from .integrations import mcp_server as mcp_server

__version__ = "0.1.0"
"""The version of this closedloop release."""

_agent_all = [
    "Agent",
    "AgentResult",
    "HaltReason",
    "ModelSettings",
    "RunLimits",
    "RunResult",
    "Runtime",
    "run_agent",
    "stop_after_delay",
    "stop_after_steps",
    "stop_on_budget",
    "stop_on_no_progress",
    "stop_on_repeats",
    "tool",
]

# Tools from an MCP server, beside ``tool``: ``Agent(model, tools=[mcp_server("..."), f])``.
_integrations_all = ["mcp_server"]
_execution_all = ["Secret"]

__all__ = sorted(
    ["__version__", *_exceptions_all, *_agent_all, *_integrations_all, *_execution_all]
)


def __getattr__(name: str) -> Any:
    # The loop's names load on first use: ``import closedloop`` (and the CLI) stays light.
    if name in _agent_all:
        from . import agent

        return getattr(agent, name)
    if name in _integrations_all:
        from . import integrations

        return getattr(integrations, name)
    if name in _execution_all:
        from . import execution

        return getattr(execution, name)
    raise AttributeError(f"module 'closedloop' has no attribute {name!r}")
