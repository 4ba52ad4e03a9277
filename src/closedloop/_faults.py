"""Fault events the healing strategies react to.

Perception and execution publish these on the feedback layer's ``EventBus``; strategies
registered up front answer with ``HealingAction``s, so the loop never branches on error
types. The events live beside the shared error type, outside both packages, because
perception emits them and feedback reacts to them, and neither may import the other.
The strategies read events structurally (``source``, ``session_id``, ``retry_after_s``,
...), so an event class defined elsewhere with the same attributes works with them too.
"""

from __future__ import annotations

from dataclasses import dataclass

from ._exceptions import ConfigurationError
from ._public import present_under
from ._validation import require_non_negative, require_positive

__all__ = [
    "EmptyResult",
    "FaultEvent",
    "HandoverRequested",
    "RateLimited",
    "SchemaDrift",
    "ServerError",
    "TimeoutEvent",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class FaultEvent:
    """Something went wrong at ``source`` (a tool, an API, a model) during a session."""

    source: str
    session_id: str | None = None
    detail: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.source, str) or not self.source:
            raise ConfigurationError("source", self.source, "must be a non-empty string")


@dataclass(frozen=True, slots=True, kw_only=True)
class RateLimited(FaultEvent):
    """The source answered 429 (or equivalent); ``retry_after_s`` is its Retry-After, if any.

    :class:`~closedloop.perception.HttpTool` emits this very class (``at`` is its clock's
    reading when the answer came), so the default healing policy hears every 429.
    """

    retry_after_s: float | None = None
    at: float | None = None

    def __post_init__(self) -> None:
        FaultEvent.__post_init__(self)
        if self.retry_after_s is not None:
            require_non_negative("retry_after_s", self.retry_after_s)


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerError(FaultEvent):
    """The source answered with a 5xx status."""

    status_code: int = 503


@dataclass(frozen=True, slots=True, kw_only=True)
class TimeoutEvent(FaultEvent):
    """A call to the source ran past ``timeout_s``."""

    timeout_s: float | None = None
    latency_s: float | None = None

    def __post_init__(self) -> None:
        FaultEvent.__post_init__(self)
        if self.timeout_s is not None:
            require_positive("timeout_s", self.timeout_s)


@dataclass(frozen=True, slots=True, kw_only=True)
class EmptyResult(FaultEvent):
    """The source answered, with nothing in it (not the absence of a constraint)."""

    query: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class SchemaDrift(FaultEvent):
    """The source's answer no longer matches the expected schema."""

    missing_fields: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class HandoverRequested(FaultEvent):
    """The loop decided a human must take over (``detail`` says why)."""


# Their public home is closedloop.feedback (the layer that answers them), whichever
# package is imported first; set here, where they are defined, not as an import side effect.
present_under(globals(), __all__, "closedloop.feedback")
