"""The controller every integration shares: one PID per key, one schedule, one history.

An integration (decorator, middleware, graph node) measures an error ``e ∈ [0, 1]`` after
each attempt and hands it to :meth:`ControlLoop.update`; the loop runs the key's PID and
turns its output ``u`` into :class:`~closedloop.control.ActuatorSettings` for the next
attempt. Nothing here reads a clock: every update is one sample of length ``dt``
(one sample per task, whatever the task's duration, keeps controller and ESO on one scale).

The PID acts on ``e − tolerance``. With a plain setpoint of 0 the error could never be
negative, so the integral would only ever grow and the loop would stay rigorous long after
the disturbance ended; aiming at a small tolerated error lets good calls wind it back down.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict, deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from .._exceptions import ConfigurationError
from .._validation import require_int_at_least, require_positive, require_unit_interval
from ..control import PID, ActuatorSchedule, ActuatorSettings, Strictness
from ..control._schedules import reported_u

__all__ = ["DEFAULT_GAINS", "ControlContext", "ControlLoop", "ControlRecord"]

DEFAULT_GAINS: tuple[float, float, float] = (0.8, 0.05, 0.3)
"""``Kp=0.8, Ki=0.05, Kd=0.3``: the starting gains for a single tool-calling step."""


def _check_gains(gains: Any) -> tuple[float, float, float]:
    try:
        kp, ki, kd = gains
    except (TypeError, ValueError):
        raise ConfigurationError("gains", gains, "must be a (kp, ki, kd) triple") from None
    checked: list[float] = []
    for name, value in (("kp", kp), ("ki", ki), ("kd", kd)):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigurationError(f"gains.{name}", value, "must be a real number")
        if not math.isfinite(value) or value < 0.0:
            raise ConfigurationError(f"gains.{name}", value, "must be finite and >= 0")
        checked.append(float(value))
    if not any(checked):
        raise ConfigurationError("gains", gains, "at least one gain must be > 0")
    return checked[0], checked[1], checked[2]


def _check_key(key: Any) -> str:
    if not isinstance(key, str):
        raise ConfigurationError("key", key, "must be a str (a key function must return one)")
    return key


@dataclass(frozen=True, slots=True)
class ControlContext:
    """What one attempt is told about the control loop it runs in.

    ``settings`` are the actuator settings in force for this attempt; ``attempt`` counts
    from 1 within one call; ``last_error`` is the error measured on the key's previous
    attempt (None before the first). The middleware also fills ``dynamic_timeout_s`` from
    the route's latency history (a predictive timeout).
    """

    key: str
    settings: ActuatorSettings
    attempt: int = 1
    last_error: float | None = None
    dynamic_timeout_s: float | None = None

    @property
    def rigour(self) -> float:
        """The control signal ``u ∈ [0, 1]``, read as how rigorous this attempt should be."""
        return self.settings.u

    @property
    def strictness(self) -> Strictness:
        """The scheduled output strictness (loose or strict)."""
        return self.settings.strictness

    @property
    def max_retries(self) -> int:
        """How many retries the schedule allows at this rigour."""
        return self.settings.max_retries

    @property
    def strict(self) -> bool:
        """True when the schedule asks for strict, schema-constrained output."""
        return self.settings.strictness is Strictness.STRICT

    @property
    def timeout_s(self) -> float:
        """The scheduled timeout in seconds."""
        return self.settings.timeout_ms / 1000.0

    @property
    def retry_delay_s(self) -> float:
        """The scheduled delay before a retry, in seconds."""
        return self.settings.retry_delay_ms / 1000.0

    def prompt(self, language: str = "en") -> str:
        """The system-prompt text for this rigour (see :func:`rigour_prompt`)."""
        from ._prompt import rigour_prompt

        return rigour_prompt(self.settings, language=language)

    def headers(self, prefix: str = "x-closedloop-") -> list[tuple[str, str]]:
        """The settings as HTTP headers, e.g. ``x-closedloop-rigour: 0.650``."""
        s = self.settings
        return [
            (f"{prefix}rigour", f"{s.u:.3f}"),
            (f"{prefix}strictness", str(s.strictness)),
            (f"{prefix}feedback", str(s.feedback_intensity)),
            (f"{prefix}timeout-ms", str(round(s.timeout_ms))),
            (f"{prefix}retry-delay-ms", str(round(s.retry_delay_ms))),
            (f"{prefix}max-retries", str(s.max_retries)),
        ]

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-ready values."""
        return {
            "key": self.key,
            "attempt": self.attempt,
            "last_error": self.last_error,
            "dynamic_timeout_s": self.dynamic_timeout_s,
            "settings": self.settings.as_dict(),
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class ControlRecord:
    """One update of the loop: the error measured after an attempt and what it led to.

    ``applied`` are the settings the attempt ran with; ``settings`` are the ones the
    update produced, in force from the next attempt. ``call`` numbers the calls of the
    loop (all attempts of one call share it). ``parts`` holds the error's components where
    an integration combines several (the middleware: status, latency, body). ``note``
    says what was unusual: a clipped metric value, an exception, a body left unchecked.
    """

    seq: int
    key: str
    call: int
    attempt: int
    error: float
    u: float
    components: tuple[float, float, float]
    applied: ActuatorSettings
    settings: ActuatorSettings
    failed: bool
    exception: str | None = None
    latency_s: float | None = None
    note: str | None = None
    parts: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-ready values for a trace line."""
        return {
            "seq": self.seq,
            "key": self.key,
            "call": self.call,
            "attempt": self.attempt,
            "error": self.error,
            "u": self.u,
            "components": list(self.components),
            "applied": self.applied.as_dict(),
            "settings": self.settings.as_dict(),
            "failed": self.failed,
            "exception": self.exception,
            "latency_s": self.latency_s,
            "note": self.note,
            "parts": dict(self.parts),
        }


class _KeyState:
    __slots__ = ("last_error", "pid", "settings")

    def __init__(self, pid: PID, settings: ActuatorSettings) -> None:
        self.pid = pid
        self.settings = settings
        self.last_error: float | None = None


class ControlLoop:
    """Per-key PIDs driving one :class:`~closedloop.control.ActuatorSchedule`.

    Args:
        gains: ``(kp, ki, kd)``, all ≥ 0 and not all zero (default 0.8/0.05/0.3).
        tolerance: the error the loop aims at; errors below it wind the integral back.
        schedule: maps ``u`` to actuator settings (default ``ActuatorSchedule()``).
        dt: the sample length of one update (default 1.0: one attempt, one sample).
        starting_u: the output a new key starts from (its initial integral).
        history: how many :class:`ControlRecord` are kept, newest last.
        max_keys: how many keys keep a PID; the least recently used is forgotten first,
            so a key function over unbounded inputs cannot grow memory without limit.

    Thread-safe: sync functions wrapped by the decorator may run in a thread pool.
    """

    def __init__(
        self,
        *,
        gains: tuple[float, float, float] = DEFAULT_GAINS,
        tolerance: float = 0.1,
        schedule: ActuatorSchedule | None = None,
        dt: float = 1.0,
        starting_u: float = 0.0,
        history: int = 1000,
        max_keys: int = 1024,
    ) -> None:
        self.gains = _check_gains(gains)
        self.tolerance = require_unit_interval("tolerance", tolerance)
        if self.tolerance >= 1.0:
            raise ConfigurationError("tolerance", tolerance, "must be < 1")
        self.schedule = ActuatorSchedule() if schedule is None else schedule
        if not callable(self.schedule):
            raise ConfigurationError("schedule", schedule, "must be callable as schedule(u)")
        initial = self.schedule(require_unit_interval("starting_u", starting_u))
        if not isinstance(initial, ActuatorSettings):
            raise ConfigurationError("schedule", schedule, "must return ActuatorSettings")
        self._initial = initial
        self.starting_u = float(starting_u)
        self.dt = require_positive("dt", dt)
        self._history: deque[ControlRecord] = deque(
            maxlen=require_int_at_least("history", history, 1)
        )
        self.max_keys = require_int_at_least("max_keys", max_keys, 1)
        self._keys: OrderedDict[str, _KeyState] = OrderedDict()
        self._lock = threading.Lock()
        self._seq = 0
        self._calls = 0

    # --- reading -------------------------------------------------------------------------

    def settings(self, key: str) -> ActuatorSettings:
        """The settings in force for ``key`` now (the schedule at ``starting_u`` if new)."""
        with self._lock:
            state = self._keys.get(_check_key(key))
            return self._initial if state is None else state.settings

    def context(self, key: str, attempt: int = 1) -> ControlContext:
        """A :class:`ControlContext` for the next attempt on ``key``."""
        with self._lock:
            state = self._keys.get(_check_key(key))
        if state is None:
            return ControlContext(key=key, settings=self._initial, attempt=attempt)
        return ControlContext(
            key=key, settings=state.settings, attempt=attempt, last_error=state.last_error
        )

    def pid(self, key: str) -> PID:
        """The PID of ``key`` (created on first use); for inspection and tuning."""
        with self._lock:
            return self._state(_check_key(key)).pid

    @property
    def keys(self) -> tuple[str, ...]:
        """The keys that hold a PID, least recently used first."""
        with self._lock:
            return tuple(self._keys)

    @property
    def history(self) -> tuple[ControlRecord, ...]:
        """Every kept record, oldest first."""
        with self._lock:
            return tuple(self._history)

    def records(self, key: str) -> tuple[ControlRecord, ...]:
        """The kept records of one key, oldest first."""
        with self._lock:
            return tuple(r for r in self._history if r.key == key)

    # --- writing -------------------------------------------------------------------------

    def begin_call(self) -> int:
        """A fresh call number; every attempt of one call is recorded under it."""
        with self._lock:
            self._calls += 1
            return self._calls

    def update(
        self,
        key: str,
        error: float,
        *,
        call: int | None = None,
        attempt: int = 1,
        failed: bool | None = None,
        exception: str | None = None,
        latency_s: float | None = None,
        note: str | None = None,
        parts: Mapping[str, float] | None = None,
    ) -> ControlRecord:
        """Feed one measured error to the key's PID; record and return the result.

        ``error`` must already lie in ``[0, 1]`` (integrations clip and note first).
        ``failed`` defaults to ``error > 0.5``.
        """
        e = require_unit_interval("error", error)
        with self._lock:
            state = self._state(_check_key(key))
            applied = state.settings
            # The PID sees the measurement −e against the setpoint −tolerance, so its
            # error term is e − tolerance and its derivative follows e itself.
            u = state.pid(-e, self.dt)
            settings = self.schedule(u)
            state.settings = settings
            state.last_error = e
            if call is None:
                self._calls += 1
                call = self._calls
            self._seq += 1
            record = ControlRecord(
                seq=self._seq,
                key=key,
                call=call,
                attempt=attempt,
                error=e,
                u=reported_u(self.schedule, u),
                components=state.pid.components,
                applied=applied,
                settings=settings,
                failed=e > 0.5 if failed is None else failed,
                exception=exception,
                latency_s=latency_s,
                note=note,
                parts=MappingProxyType(dict(parts or {})),
            )
            self._history.append(record)
            return record

    def reset(self, key: str | None = None) -> None:
        """Forget one key's PID and settings, or (no key) every key and the history."""
        with self._lock:
            if key is None:
                self._keys.clear()
                self._history.clear()
            else:
                self._keys.pop(key, None)

    def _state(self, key: str) -> _KeyState:
        state = self._keys.get(key)
        if state is None:
            kp, ki, kd = self.gains
            pid = PID(
                kp,
                ki,
                kd,
                setpoint=-self.tolerance,
                output_limits=(0.0, 1.0),
                starting_output=self.starting_u,
                time_fn=_no_clock,
            )
            state = _KeyState(pid, self._initial)
            self._keys[key] = state
            while len(self._keys) > self.max_keys:
                self._keys.popitem(last=False)
        else:
            self._keys.move_to_end(key)
        return state

    def __repr__(self) -> str:
        return (
            f"ControlLoop(gains={self.gains!r}, tolerance={self.tolerance!r}, "
            f"keys={len(self._keys)}, records={len(self._history)})"
        )


def _no_clock() -> float:
    # Every update passes dt explicitly; the PID only reads its clock on reset.
    return 0.0
