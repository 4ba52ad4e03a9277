"""``CircuitBreaker``: stop calling a failing source, then probe it before trusting it again."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum
from types import TracebackType
from typing import Any, ParamSpec, Self, TypeVar

from .._exceptions import CircuitOpenError, ConfigurationError
from .._validation import require_int_at_least, require_positive

__all__ = ["CircuitBreaker", "CircuitState"]

_P = ParamSpec("_P")
_T = TypeVar("_T")
_log = logging.getLogger("closedloop.feedback")


class CircuitState(StrEnum):
    """Where a breaker stands: calls pass (closed), are refused (open), or probe (half-open)."""

    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


@dataclass(frozen=True, slots=True)
class _Permit:
    generation: int  # outcomes of calls admitted before the last transition are ignored
    probe: bool


Transition = Callable[["CircuitBreaker", CircuitState, CircuitState], None]


class CircuitBreaker:
    """A closed / open / half-open breaker on an injected clock.

    Closed: calls pass; ``failure_threshold`` consecutive failures open it. Open: calls
    raise :class:`CircuitOpenError` without running, until ``recovery_timeout_s`` has
    passed on ``clock``; then it is half-open. Half-open: at most ``half_open_probes``
    calls are let through; if all of them succeed it closes, if any fails it opens again
    for another ``recovery_timeout_s``.

    Use ``async with breaker: ...`` or ``await breaker.call(fn, *args)``. Exceptions that
    are not ``failure_types`` (and cancellation) count as neither success nor failure.
    :meth:`record_failure` and :meth:`record_success` feed outcomes observed elsewhere
    (e.g. from fault events). ``on_transition(breaker, old, new)`` is called on each change.
    """

    def __init__(
        self,
        name: str = "circuit",
        *,
        failure_threshold: int = 5,
        recovery_timeout_s: float = 30.0,
        half_open_probes: int = 1,
        failure_types: tuple[type[BaseException], ...] = (Exception,),
        clock: Callable[[], float] = time.monotonic,
        on_transition: Transition | None = None,
    ) -> None:
        self.name = name
        self.failure_threshold = require_int_at_least("failure_threshold", failure_threshold, 1)
        self.recovery_timeout_s = require_positive("recovery_timeout_s", recovery_timeout_s)
        self.half_open_probes = require_int_at_least("half_open_probes", half_open_probes, 1)
        if not isinstance(failure_types, tuple) or not all(
            isinstance(t, type) and issubclass(t, BaseException) for t in failure_types
        ):
            raise ConfigurationError(
                "failure_types", failure_types, "must be a tuple of exception classes"
            )
        self.failure_types = failure_types
        self._clock = clock
        self._on_transition = on_transition
        self._lock = threading.RLock()
        self._state = CircuitState.CLOSED
        self._generation = 0
        self._failures = 0
        self._opened_at: float | None = None
        self._probes_admitted = 0
        self._probe_successes = 0
        self._times_opened = 0
        self._active: dict[object, list[_Permit]] = {}

    def __repr__(self) -> str:
        return f"CircuitBreaker({self.name!r}, state={self.state.value}, failures={self._failures})"

    # --- state ---------------------------------------------------------------------------

    @property
    def state(self) -> CircuitState:
        """The current state; an open breaker turns half-open once its recovery time passed."""
        with self._lock:
            self._refresh()
            return self._state

    @property
    def failures(self) -> int:
        """Consecutive failures counted while closed."""
        return self._failures

    @property
    def times_opened(self) -> int:
        """How many times this breaker has opened."""
        return self._times_opened

    @property
    def retry_at(self) -> float | None:
        """When an open breaker lets its first probe through (clock time), else None."""
        with self._lock:
            self._refresh()
            if self._state is not CircuitState.OPEN or self._opened_at is None:
                return None
            return self._opened_at + self.recovery_timeout_s

    def _refresh(self) -> None:
        if (
            self._state is CircuitState.OPEN
            and self._opened_at is not None
            and self._clock() >= self._opened_at + self.recovery_timeout_s
        ):
            self._move(CircuitState.HALF_OPEN)

    def _move(self, new: CircuitState) -> None:
        old = self._state
        self._state = new
        self._generation += 1
        self._failures = 0
        self._probes_admitted = 0
        self._probe_successes = 0
        if new is CircuitState.OPEN:
            self._opened_at = self._clock()
            self._times_opened += 1
        elif new is CircuitState.CLOSED:
            self._opened_at = None
        if self._on_transition is not None and old is not new:
            try:
                self._on_transition(self, old, new)
            except Exception:  # an observer must not break the breaker
                _log.exception("circuit %r: on_transition callback failed", self.name)

    def trip(self) -> None:
        """Open the breaker now, whatever its state."""
        with self._lock:
            self._move(CircuitState.OPEN)

    def reset(self) -> None:
        """Close the breaker now and forget past failures."""
        with self._lock:
            self._move(CircuitState.CLOSED)

    # --- outcomes ------------------------------------------------------------------------

    def _acquire(self) -> _Permit:
        with self._lock:
            self._refresh()
            if self._state is CircuitState.CLOSED:
                return _Permit(self._generation, probe=False)
            if self._state is CircuitState.OPEN:
                assert self._opened_at is not None
                wait = self._opened_at + self.recovery_timeout_s - self._clock()
                raise CircuitOpenError(
                    f"circuit {self.name!r} is open; next probe allowed in {wait:.3g}s"
                )
            if self._probes_admitted >= self.half_open_probes:
                raise CircuitOpenError(
                    f"circuit {self.name!r} is half-open and its {self.half_open_probes} "
                    "probe call(s) are already admitted; waiting for their outcome"
                )
            self._probes_admitted += 1
            return _Permit(self._generation, probe=True)

    def _settle(self, permit: _Permit, failed: bool | None) -> None:
        """``failed`` None: the call ended in a way that says nothing about the source."""
        with self._lock:
            if permit.generation != self._generation:
                return
            if failed is None:
                if permit.probe:
                    self._probes_admitted -= 1
                return
            self._record(failed)

    def _record(self, failed: bool) -> None:
        if self._state is CircuitState.CLOSED:
            if not failed:
                self._failures = 0
                return
            self._failures += 1
            if self._failures >= self.failure_threshold:
                self._move(CircuitState.OPEN)
        elif self._state is CircuitState.HALF_OPEN:
            if failed:
                self._move(CircuitState.OPEN)
                return
            self._probe_successes += 1
            if self._probe_successes >= self.half_open_probes:
                self._move(CircuitState.CLOSED)

    def record_failure(self) -> None:
        """Count a failure observed outside the breaker (while open it changes nothing)."""
        with self._lock:
            self._refresh()
            self._record(True)

    def record_success(self) -> None:
        """Count a success observed outside the breaker (in half-open it counts as a probe)."""
        with self._lock:
            self._refresh()
            self._record(False)

    # --- guarded calls -------------------------------------------------------------------

    async def call(
        self, fn: Callable[_P, Awaitable[_T]], *args: _P.args, **kwargs: _P.kwargs
    ) -> _T:
        """Run ``await fn(*args, **kwargs)`` through the breaker; CircuitOpenError if refused."""
        permit = self._acquire()
        try:
            result = await fn(*args, **kwargs)
        except self.failure_types:
            self._settle(permit, failed=True)
            raise
        except BaseException:
            self._settle(permit, failed=None)
            raise
        self._settle(permit, failed=False)
        return result

    @staticmethod
    def _task_key() -> object:
        task = asyncio.current_task()
        return task if task is not None else threading.get_ident()

    async def __aenter__(self) -> Self:
        permit = self._acquire()
        with self._lock:
            self._active.setdefault(self._task_key(), []).append(permit)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        key = self._task_key()
        with self._lock:
            stack = self._active[key]
            permit = stack.pop()
            if not stack:
                del self._active[key]
        if exc is None:
            self._settle(permit, failed=False)
        elif isinstance(exc, self.failure_types):
            self._settle(permit, failed=True)
        else:
            self._settle(permit, failed=None)

    def snapshot(self) -> dict[str, Any]:
        """A JSON-ready view for traces: name, state, failures, retry_at, times_opened."""
        return {
            "name": self.name,
            "state": self.state.value,
            "failures": self._failures,
            "retry_at": self.retry_at,
            "times_opened": self._times_opened,
        }
