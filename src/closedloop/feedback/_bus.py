"""``EventBus``: dispatch any object to the handlers registered for its type."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from .._exceptions import ConfigurationError

__all__ = ["Delivery", "EventBus", "Handler", "HandlerOutcome"]

_E = TypeVar("_E")
_T = TypeVar("_T")

Handler = Callable[[_E], Any]
"""A function (sync or async) taking the event; what it returns is collected."""

_log = logging.getLogger("closedloop.feedback")


def _handler_name(handler: Callable[..., Any]) -> str:
    name = getattr(handler, "__qualname__", None)
    if name is None:  # a callable object, such as a healing strategy
        return type(handler).__qualname__
    return str(name)


def _same(a: Callable[..., Any], b: Callable[..., Any]) -> bool:
    # Identity, except that each access to a bound method makes a new object; equality
    # would merge distinct strategy objects that merely compare equal.
    if a is b:
        return True
    if inspect.ismethod(a) and inspect.ismethod(b):
        return a.__self__ is b.__self__ and a.__func__ is b.__func__
    return False


@dataclass(frozen=True, slots=True)
class HandlerOutcome:
    """What one handler did with one event: its ``result``, or the ``error`` it raised."""

    handler: str
    registered_for: type
    result: Any = None
    error: Exception | None = None

    @property
    def ok(self) -> bool:
        """True when the handler returned instead of raising."""
        return self.error is None


@dataclass(frozen=True, slots=True)
class Delivery:
    """The outcome of :meth:`EventBus.publish`: every handler's result or error, in order."""

    event: object
    outcomes: tuple[HandlerOutcome, ...]

    @property
    def handled(self) -> bool:
        """True when at least one handler was registered for the event's type."""
        return bool(self.outcomes)

    @property
    def ok(self) -> bool:
        """True when no handler raised."""
        return all(o.ok for o in self.outcomes)

    @property
    def results(self) -> tuple[Any, ...]:
        """The non-None results of the handlers that returned, in dispatch order."""
        return tuple(o.result for o in self.outcomes if o.ok and o.result is not None)

    @property
    def errors(self) -> tuple[Exception, ...]:
        """The exceptions handlers raised (already logged)."""
        return tuple(o.error for o in self.outcomes if o.error is not None)

    def results_of(self, kind: type[_T]) -> tuple[_T, ...]:
        """The results that are instances of ``kind`` (e.g. ``HealingAction``)."""
        return tuple(r for r in self.results if isinstance(r, kind))


class EventBus:
    """Async publish/subscribe keyed by event type.

    Handlers are registered up front, by type, with ``@bus.on(RateLimited)`` or
    :meth:`subscribe`. :meth:`publish` runs, one after another, the handlers of the
    event's class and then those of its base classes (most specific first, each handler
    once), and returns their results. A handler that raises does not stop the others and
    does not raise into the publisher: its exception is logged and returned in the
    :class:`Delivery`. Any object can be published; dispatch uses only its type.
    """

    def __init__(self, *, logger: logging.Logger | None = None) -> None:
        self._handlers: dict[type, list[Callable[[Any], Any]]] = {}
        self._resolved: dict[type, tuple[tuple[type, Callable[[Any], Any]], ...]] = {}
        self._log = logger or _log

    def __repr__(self) -> str:
        counts = {t.__name__: len(h) for t, h in self._handlers.items()}
        return f"EventBus({counts})"

    def subscribe(self, event_type: type[_E], handler: Handler[_E]) -> None:
        """Register ``handler`` for events of ``event_type`` and its subclasses."""
        if not isinstance(event_type, type):
            raise ConfigurationError("event_type", event_type, "must be a class")
        if not callable(handler):
            raise ConfigurationError("handler", handler, "must be callable")
        self._handlers.setdefault(event_type, []).append(handler)
        self._resolved.clear()

    def on(self, event_type: type[_E]) -> Callable[[Handler[_E]], Handler[_E]]:
        """Decorator form of :meth:`subscribe`; returns the function unchanged."""

        def register(handler: Handler[_E]) -> Handler[_E]:
            self.subscribe(event_type, handler)
            return handler

        return register

    def handlers_for(self, event_type: type) -> tuple[tuple[type, Callable[[Any], Any]], ...]:
        """The (registered type, handler) pairs an event of ``event_type`` is dispatched to."""
        resolved = self._resolved.get(event_type)
        if resolved is None:
            pairs: list[tuple[type, Callable[[Any], Any]]] = []
            for cls in event_type.__mro__:
                for handler in self._handlers.get(cls, ()):
                    if not any(_same(handler, seen) for _, seen in pairs):
                        pairs.append((cls, handler))
            resolved = self._resolved[event_type] = tuple(pairs)
        return resolved

    async def publish(self, event: object) -> Delivery:
        """Run the handlers for ``event``'s type; collect their results and errors."""
        outcomes: list[HandlerOutcome] = []
        for registered_for, handler in self.handlers_for(type(event)):
            name = _handler_name(handler)
            try:
                result = handler(event)
                if inspect.isawaitable(result):
                    result = await result
            except Exception as exc:
                self._log.warning(
                    "event handler %s failed on %s: %r",
                    name,
                    type(event).__name__,
                    exc,
                    exc_info=exc,
                )
                outcomes.append(HandlerOutcome(name, registered_for, error=exc))
            else:
                outcomes.append(HandlerOutcome(name, registered_for, result=result))
        if not outcomes:
            self._log.debug("no handler for %s", type(event).__name__)
        return Delivery(event, tuple(outcomes))
