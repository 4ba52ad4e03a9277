"""Events perception emits, and how listeners receive them.

Perception stays independent of the feedback layer's event bus: a tool takes plain
callbacks, and a bus can subscribe by passing its ``publish`` method as one. The event
is the shared fault event :class:`~closedloop.feedback.RateLimited` (defined beside the
error type, so neither package imports the other), and the default healing policy
reacts to it.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence

from .._exceptions import ConfigurationError
from .._faults import RateLimited

__all__ = [
    "EventListener",
    "PerceptionEvent",
    "check_listeners",
    "emit",
]

_log = logging.getLogger("closedloop.perception")


# One class for a 429 across the package: the one the healing policy subscribes to.
PerceptionEvent = RateLimited
EventListener = Callable[[PerceptionEvent], Awaitable[None] | None]
"""A callback a tool calls with each perception event; it may be sync or async."""


def check_listeners(
    on_event: EventListener | Sequence[EventListener] | None,
) -> list[EventListener]:
    """Normalise the ``on_event`` argument to a list of callables."""
    if on_event is None:
        return []
    listeners = [on_event] if callable(on_event) else list(on_event)
    for listener in listeners:
        if not callable(listener):
            raise ConfigurationError("on_event", listener, "must be callable")
    return listeners


async def emit(listeners: Sequence[EventListener], event: PerceptionEvent) -> None:
    """Deliver ``event`` to every listener, sync or async.

    A failing listener is logged and skipped: an observer's bug must not turn a
    scored observation into a crash of the loop, nor starve the other listeners.
    """
    for listener in listeners:
        try:
            result = listener(event)
            if inspect.isawaitable(result):
                await result
        except Exception:
            _log.exception("event listener %r failed on %r", listener, event)
