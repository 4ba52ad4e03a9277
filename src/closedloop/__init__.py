"""closedloop: run LLM agents as closed-loop control systems.

observe -> measure error -> controller -> actuate -> act -> observe.
The subpackages mirror that loop: ``closedloop.control`` (controllers, observers,
schedules), ``closedloop.perception``, ``closedloop.decision``, ``closedloop.execution``,
``closedloop.feedback``, ``closedloop.agent``, with ``closedloop.models`` at the edge.
"""

from __future__ import annotations

from ._exceptions import *  # noqa: F403
from ._exceptions import __all__ as _exceptions_all

__version__ = "0.1.0"

__all__ = ["__version__", *_exceptions_all]
