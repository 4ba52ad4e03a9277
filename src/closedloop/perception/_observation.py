"""The scored observation: what the loop knows about one answer from the world."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ._compact import compact

__all__ = ["EMPTY_MEANING", "Observation", "ObservationStatus"]

EMPTY_MEANING = "no match found; this is not the absence of a constraint"
"""What an empty result means. A known failure: a model read an empty list as "no
restriction applies" and acted on it. The meaning sentence says otherwise, every time."""


_UNSET: Any = object()  # tells "no value given" from an explicit None


class ObservationStatus(StrEnum):
    """How an answer came about; decision rules key on this, not on the value."""

    OK = "ok"
    EMPTY = "empty"
    PARTIAL = "partial"
    STALE = "stale"
    ERROR = "error"
    RATE_LIMITED = "rate_limited"
    TIMEOUT = "timeout"


def _now(timestamp: float | None) -> float:
    # Constructors are used at the edges (tools, tests, adapters) where a wall-clock
    # default is the convenient one; HttpTool always passes its injected clock.
    return time.time() if timestamp is None else timestamp


class Observation(BaseModel):
    """One scored answer from the world.

    ``confidence`` is how far the loop may trust ``value`` (1.0: fresh and complete,
    0.0: nothing usable). ``meaning`` is one sentence for the model to read; it states
    what the status implies, e.g. that an empty result is not the absence of a constraint.
    ``raw`` keeps what the source actually sent (compacted when huge). The model is
    frozen; ``value`` and ``raw`` are not deep-copied, so treat them as read-only.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    value: Any
    confidence: float = Field(ge=0.0, le=1.0)
    timestamp: float
    source: str = Field(min_length=1)
    status: ObservationStatus
    meaning: str = Field(min_length=1)
    raw: Any = None
    latency_s: float | None = Field(default=None, ge=0.0)
    error: str | None = None
    retry_after_s: float | None = Field(default=None, ge=0.0)
    age_s: float | None = Field(default=None, ge=0.0)

    @property
    def usable(self) -> bool:
        """True when ``value`` carries an answer the loop may act on (possibly degraded)."""
        return self.status in (
            ObservationStatus.OK,
            ObservationStatus.EMPTY,
            ObservationStatus.PARTIAL,
            ObservationStatus.STALE,
        ) or (self.status is ObservationStatus.TIMEOUT and self.age_s is not None)

    def compacted(self, max_chars: int) -> Observation:
        """A copy with ``value`` and ``raw`` cut to ``max_chars``; ``meaning`` names the cuts."""
        notes: list[str] = []
        update: dict[str, Any] = {}
        for name in ("value", "raw"):
            result = compact(getattr(self, name), max_chars)
            if result.cut:
                update[name] = result.value
                notes.append(f"{name} {result.note}")
        if not notes:
            return self
        update["meaning"] = f"{self.meaning} ({'; '.join(notes)})"
        return self.model_copy(update=update)

    @classmethod
    def _build(
        cls, status: ObservationStatus, arguments: Mapping[str, Any], **fields: Any
    ) -> Observation:
        """The factories' one constructor: every factory argument named like a field is that
        field (``fields`` override them), and a missing ``timestamp`` is now."""
        data = {name: arguments[name] for name in cls.model_fields if name in arguments}
        data.update(fields)
        data["timestamp"] = _now(data.get("timestamp"))
        return cls(status=status, **data)

    @classmethod
    def ok(
        cls,
        value: Any,
        *,
        source: str,
        timestamp: float | None = None,
        confidence: float = 1.0,
        meaning: str | None = None,
        raw: Any = None,
        latency_s: float | None = None,
    ) -> Observation:
        """A fresh, complete answer."""
        return cls._build(
            ObservationStatus.OK,
            locals(),
            meaning=meaning or f"{source} answered with a complete result",
        )

    @classmethod
    def empty(
        cls,
        *,
        source: str,
        value: Any = _UNSET,
        timestamp: float | None = None,
        confidence: float = 0.9,
        meaning: str = EMPTY_MEANING,
        raw: Any = None,
        latency_s: float | None = None,
    ) -> Observation:
        """A well-formed answer with no match in it (``value`` defaults to ``[]``).

        The default confidence 0.9 is the trust that there really is no match: the
        source answered properly, but an empty answer is also what a silently failing
        index returns, so it is kept below a complete result.
        """
        value = [] if value is _UNSET else value
        return cls._build(ObservationStatus.EMPTY, locals())

    @classmethod
    def partial(
        cls,
        value: Any,
        *,
        source: str,
        missing: Sequence[str] = (),
        timestamp: float | None = None,
        confidence: float = 0.6,
        meaning: str | None = None,
        raw: Any = None,
        latency_s: float | None = None,
        age_s: float | None = None,
        error: str | None = None,
    ) -> Observation:
        """An answer with key fields missing or failing the schema."""
        what = f"key fields missing: {', '.join(missing)}" if missing else "answer is incomplete"
        return cls._build(
            ObservationStatus.PARTIAL, locals(), meaning=meaning or f"{source}: {what}"
        )

    @classmethod
    def stale(
        cls,
        value: Any,
        *,
        source: str,
        age_s: float,
        timestamp: float | None = None,
        confidence: float = 0.7,
        meaning: str | None = None,
        raw: Any = None,
        latency_s: float | None = None,
        error: str | None = None,
        retry_after_s: float | None = None,
    ) -> Observation:
        """A cached answer standing in for a fresh one that could not be had."""
        default = f"{source}: cached answer from {age_s:.1f} s ago, not fresh"
        return cls._build(ObservationStatus.STALE, locals(), meaning=meaning or default)

    @classmethod
    def failed(
        cls,
        error: str,
        *,
        source: str,
        confidence: float = 0.0,
        timestamp: float | None = None,
        meaning: str | None = None,
        value: Any = None,
        raw: Any = None,
        latency_s: float | None = None,
        retry_after_s: float | None = None,
    ) -> Observation:
        """No usable answer (status ``error``); named ``failed`` because ``error`` is a field."""
        default = f"{source} gave no usable answer: {error}"
        return cls._build(ObservationStatus.ERROR, locals(), meaning=meaning or default)

    @classmethod
    def rate_limited(
        cls,
        *,
        source: str,
        retry_after_s: float | None = None,
        timestamp: float | None = None,
        meaning: str | None = None,
        raw: Any = None,
        latency_s: float | None = None,
    ) -> Observation:
        """The source asked us to slow down; nothing was learned (confidence 0)."""
        when = f"retry after {retry_after_s:g} s" if retry_after_s is not None else "back off"
        default = f"{source} is rate limiting us; {when}; no data was returned"
        return cls._build(
            ObservationStatus.RATE_LIMITED,
            locals(),
            value=None,
            confidence=0.0,
            meaning=meaning or default,
            error="rate limited",
        )

    @classmethod
    def timeout(
        cls,
        *,
        source: str,
        timeout_s: float,
        value: Any = None,
        age_s: float | None = None,
        confidence: float = 0.1,
        timestamp: float | None = None,
        meaning: str | None = None,
        latency_s: float | None = None,
    ) -> Observation:
        """No answer within ``timeout_s``; ``value`` may carry a cached answer of age ``age_s``."""
        cached = (
            f"; value is the cached answer from {age_s:.1f} s ago"
            if age_s is not None
            else "; no data"
        )
        default = f"{source} did not answer within {timeout_s:.3g} s{cached}"
        return cls._build(
            ObservationStatus.TIMEOUT,
            locals(),
            meaning=meaning or default,
            error=f"timed out after {timeout_s:.3g} s",
        )
