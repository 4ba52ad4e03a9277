"""Integration modes: closed-loop control without rewriting the agent.

Three ways in, from the lightest:

* prompt injection: :func:`rigour_prompt` / :func:`inject_rigour` write the controller's
  current rigour into the system prompt;
* the decorator: :func:`controlled` wraps any sync or async callable with sensing, a PID
  and scheduled retries;
* the middleware: :class:`ClosedLoopMiddleware` does the same per route of an ASGI app
  (FastAPI, Starlette) and passes the settings to handlers and clients.

Tools from Model Context Protocol servers come in through :func:`mcp_server` (optional
extra ``mcp``, imported only when a server is used). A LangGraph adapter lives in
:mod:`closedloop.integrations.langgraph` (optional extra ``langgraph``); it is not imported
here. All of them share :class:`ControlLoop`: one PID
per key, one actuator schedule, one history of :class:`ControlRecord`.

This package sits at the edge: it imports the core, the core never imports it.
"""

from __future__ import annotations

from .._public import present_under
from ._asgi import ClosedLoopMiddleware, default_route_key
from ._decorator import Controlled, controlled
from ._loop import DEFAULT_GAINS, ControlContext, ControlLoop, ControlRecord
from ._mcp import McpServer, mcp_server
from ._metrics import (
    EMPTY_ERROR,
    EXCEPTION_ERROR,
    Invocation,
    check_error,
    default_metric,
    json_metric,
    status_error,
)
from ._prompt import inject_rigour, rigour_prompt, strip_rigour

__all__ = [
    "DEFAULT_GAINS",
    "EMPTY_ERROR",
    "EXCEPTION_ERROR",
    "ClosedLoopMiddleware",
    "ControlContext",
    "ControlLoop",
    "ControlRecord",
    "Controlled",
    "Invocation",
    "McpServer",
    "check_error",
    "controlled",
    "default_metric",
    "default_route_key",
    "inject_rigour",
    "json_metric",
    "mcp_server",
    "rigour_prompt",
    "status_error",
    "strip_rigour",
]

# Public names show as closedloop.integrations.X in reprs and docs.
present_under(globals(), __all__, __name__)
