"""Schedules: from a control signal ``u ∈ [0, 1]`` to actuator settings.

A schedule is a small frozen object, called as ``schedule(u)``. Two kinds cover every
actuator: :class:`ScheduleLevels` (a step function over named levels) and
:class:`ScheduleLinear` (``offset + slope·u``). :class:`ActuatorSchedule` combines one
schedule per actuator into a single :class:`ActuatorSettings` record for the step.

Every schedule clips ``u`` to ``[0, 1]`` first (a controller without output limits must
not schedule a negative delay) and rejects NaN and infinities.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Generic, TypeVar

from .._exceptions import ConfigurationError
from .._validation import require_finite, require_unit_interval

__all__ = [
    "ActuatorSchedule",
    "ActuatorSettings",
    "FeedbackIntensity",
    "ScheduleLevels",
    "ScheduleLinear",
    "Strictness",
    "schedule_context",
    "schedule_feedback_intensity",
    "schedule_levels",
    "schedule_linear",
    "schedule_max_retries",
    "schedule_retry_delay_ms",
    "schedule_rung",
    "schedule_strictness",
    "schedule_timeout_ms",
    "schedule_votes",
]

T = TypeVar("T")


def _clip_u(u: float) -> float:
    # The usual case first, a float already in [0, 1] (NaN fails the comparison): an
    # ActuatorSchedule clips u once, then hands it to each of its eight schedules.
    if type(u) is float and 0.0 <= u <= 1.0:
        return u
    u = require_finite("u", u)
    return 0.0 if u < 0.0 else 1.0 if u > 1.0 else u


class FeedbackIntensity(StrEnum):
    """How hard the next refinement round's feedback pushes: fix, restructure, replace."""

    LIGHT = "light"
    MEDIUM = "medium"
    HEAVY = "heavy"


class Strictness(StrEnum):
    """How hard a reply is held to the action format, as one ladder.

    ``loose``: the reply is parsed leniently; ``reask``: a reply the validator refuses is
    sent back once more within the same step with the validator's error text; ``strict``:
    the reply is decoded under the action grammar (and re-asked like ``reask`` if it still
    fails). The members are in ladder order, so ``rank`` compares two levels.
    """

    LOOSE = "loose"
    REASK = "reask"
    STRICT = "strict"

    @property
    def rank(self) -> int:
        """0 for loose, 1 for re-ask, 2 for the grammar."""
        return _STRICTNESS_ORDER.index(self)


_STRICTNESS_ORDER = (Strictness.LOOSE, Strictness.REASK, Strictness.STRICT)


@dataclass(frozen=True, slots=True)
class ScheduleLevels(Generic[T]):
    """A step function: ``levels[i]`` for ``thresholds[i−1] ≤ u < thresholds[i]``.

    A value exactly on a threshold takes the upper level, as in the feedback-intensity
    schedule's ``u < 0.3 → light``. Thresholds are strictly increasing and inside
    ``[0, 1]``; there is one level more than thresholds.
    """

    levels: tuple[T, ...]
    thresholds: tuple[float, ...]

    def __post_init__(self) -> None:
        levels = tuple(self.levels)
        thresholds = tuple(
            require_unit_interval(f"thresholds[{i}]", t) for i, t in enumerate(self.thresholds)
        )
        if len(levels) != len(thresholds) + 1:
            raise ConfigurationError(
                "levels",
                self.levels,
                f"needs exactly one more entry than thresholds ({len(thresholds)})",
            )
        if any(a >= b for a, b in itertools.pairwise(thresholds)):
            raise ConfigurationError("thresholds", self.thresholds, "must be strictly increasing")
        object.__setattr__(self, "levels", levels)
        object.__setattr__(self, "thresholds", thresholds)

    def __call__(self, u: float) -> T:
        return self.levels[bisect.bisect_right(self.thresholds, _clip_u(u))]


@dataclass(frozen=True, slots=True)
class ScheduleLinear:
    """``offset + slope·u``; multiply by a number to scale both (``delay * 2``)."""

    offset: float
    slope: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "offset", require_finite("offset", self.offset))
        object.__setattr__(self, "slope", require_finite("slope", self.slope))

    def __call__(self, u: float) -> float:
        return self.offset + self.slope * _clip_u(u)

    def __mul__(self, factor: float) -> ScheduleLinear:
        k = require_finite("factor", factor)
        return ScheduleLinear(self.offset * k, self.slope * k)

    __rmul__ = __mul__


def schedule_levels(levels: Sequence[T], thresholds: Sequence[float]) -> ScheduleLevels[T]:
    """A level schedule, e.g. ``schedule_levels(("light", "medium", "heavy"), (0.3, 0.6))``."""
    return ScheduleLevels(tuple(levels), tuple(thresholds))


def schedule_linear(offset: float = 100.0, slope: float = 500.0) -> ScheduleLinear:
    """A linear schedule ``offset + slope·u``."""
    return ScheduleLinear(offset, slope)


def schedule_feedback_intensity(
    thresholds: tuple[float, float] = (0.3, 0.6),
) -> ScheduleLevels[FeedbackIntensity]:
    """light below 0.3, medium below 0.6, heavy from 0.6."""
    return ScheduleLevels(tuple(FeedbackIntensity), tuple(thresholds))


def schedule_strictness(
    threshold: float = 0.7, reask: float | None = None
) -> ScheduleLevels[Strictness]:
    """loose below 0.7, strict from 0.7; with ``reask``, the middle rung of the ladder
    (re-ask with the validator's error) from ``reask`` up to ``threshold``."""
    if reask is None:
        return ScheduleLevels((Strictness.LOOSE, Strictness.STRICT), (threshold,))
    return ScheduleLevels(_STRICTNESS_ORDER, (reask, threshold))


def schedule_retry_delay_ms(offset: float = 100.0, slope: float = 500.0) -> ScheduleLinear:
    """Retry delay ``100 + 500·u`` ms: the harder the controller pushes, the more patient."""
    return ScheduleLinear(offset, slope)


def schedule_timeout_ms(
    retry_delay: ScheduleLinear | None = None, factor: float = 2.0
) -> ScheduleLinear:
    """Timeout as ``factor`` times the retry delay (by default twice), ``200 + 1000·u`` ms."""
    base = schedule_retry_delay_ms() if retry_delay is None else retry_delay
    return base * factor


def schedule_max_retries(
    threshold: float = 0.5, below: int = 0, above: int = 1
) -> ScheduleLevels[int]:
    """Extra attempts: ``below`` under ``threshold``, ``above`` from it (by default 0, then 1)."""
    return ScheduleLevels((below, above), (threshold,))


def schedule_rung(thresholds: Sequence[float] = (0.5, 0.8)) -> ScheduleLevels[int]:
    """The rung of a model ladder: 0 (the cheapest) below 0.5, 1 below 0.8, 2 from 0.8.

    One rung more than thresholds; a ladder with fewer rungs stops at its strongest, so
    a single model is rung 0 whatever ``u`` says. A cascade (Chen et al. 2023) climbed by
    the measured error: up when it is high, back down when the error is calm.
    """
    ts = tuple(thresholds)
    return ScheduleLevels(tuple(range(len(ts) + 1)), ts)


def schedule_votes(threshold: float = 0.9, below: int = 1, above: int = 3) -> ScheduleLevels[int]:
    """Samples voted on per proposal (self-consistency, Wang et al. 2023): ``below`` under
    ``threshold``, ``above`` from it (by default 1, then 3). Each count is at least 1."""
    for name, value in (("below", below), ("above", above)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigurationError(name, value, "a vote count must be an integer of at least 1")
    return ScheduleLevels((below, above), (threshold,))


def schedule_context(
    threshold: float = 0.7, below: float = 1.0, above: float = 0.5
) -> ScheduleLevels[float]:
    """The share of the context the model is shown (dimension reduction): ``below`` under
    ``threshold``, ``above`` from it (by default all, then half of the tools, the most
    relevant to the task, and of the recent observations). Each share is in (0, 1]."""
    for name, value in (("below", below), ("above", above)):
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
            raise ConfigurationError(name, value, "a context share must be in (0, 1]")
    return ScheduleLevels((float(below), float(above)), (threshold,))


@dataclass(frozen=True, slots=True, kw_only=True)
class ActuatorSettings:
    """What one step of the loop should do, derived from one control signal ``u``.

    ``rung`` is the model ladder's rung the step's proposal runs on (0 the cheapest,
    clipped to the ladder's top), ``votes`` the number of samples it votes on and
    ``context`` the share of the tools and recent observations it is shown.
    """

    u: float
    feedback_intensity: FeedbackIntensity
    strictness: Strictness
    retry_delay_ms: float
    timeout_ms: float
    max_retries: int
    rung: int = 0
    votes: int = 1
    context: float = 1.0

    def __post_init__(self) -> None:
        if isinstance(self.rung, bool) or not isinstance(self.rung, int) or self.rung < 0:
            raise ConfigurationError("rung", self.rung, "must be an integer of at least 0")
        if isinstance(self.votes, bool) or not isinstance(self.votes, int) or self.votes < 1:
            raise ConfigurationError("votes", self.votes, "a vote count must be at least 1")
        if not 0 < self.context <= 1:
            raise ConfigurationError("context", self.context, "a context share must be in (0, 1]")

    def as_dict(self) -> dict[str, Any]:
        """Plain values for a trace record (enums become their strings)."""
        # Every field is a scalar: read them directly rather than deep-copying (asdict).
        out: dict[str, Any] = {}
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            out[name] = str(value) if isinstance(value, StrEnum) else value
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class ActuatorSchedule:
    """One schedule per actuator; ``schedule(u) -> ActuatorSettings``.

    Swap any part: ``ActuatorSchedule(strictness=schedule_strictness(0.8))``. Votes and
    context reduction are off by default (one sample and the whole context at every u);
    ``votes=schedule_votes()`` and ``context=schedule_context()`` turn them on.

    ``schedule.held(u)`` takes the controller out of the loop: every actuator answers as
    at ``u`` whatever the controller says, and the settings report ``u`` itself, so every
    reader of the control signal (the rigour line of the prompt, the re-check of empty
    answers, the observer's input, the trace) sees the held value, never the live one.
    """

    feedback_intensity: Callable[[float], FeedbackIntensity] = field(
        default_factory=schedule_feedback_intensity
    )
    strictness: Callable[[float], Strictness] = field(default_factory=schedule_strictness)
    retry_delay_ms: Callable[[float], float] = field(default_factory=schedule_retry_delay_ms)
    timeout_ms: Callable[[float], float] = field(default_factory=schedule_timeout_ms)
    max_retries: Callable[[float], int] = field(default_factory=schedule_max_retries)
    rung: Callable[[float], int] = field(default_factory=schedule_rung)
    # One sample by default, as before votes existed: a second sample costs a model call,
    # so voting at high u is asked for, ``votes=schedule_votes()``.
    votes: Callable[[float], int] = field(default_factory=lambda: schedule_votes(above=1))
    # The whole context by default: a model shown fewer tools may miss the one it needs,
    # so the reduction is asked for, ``context=schedule_context()``.
    context: Callable[[float], float] = field(default_factory=lambda: schedule_context(above=1.0))
    # The control signal every step is scheduled at, whatever the controller's output
    # (None: the live output). Set through ``held``.
    hold: float | None = None

    def __post_init__(self) -> None:
        if self.hold is not None:
            object.__setattr__(self, "hold", require_unit_interval("hold", self.hold))

    def held(self, u: float) -> ActuatorSchedule:
        """This schedule frozen at ``u``: each actuator a constant (its value at ``u``,
        also when called directly, ``schedule.max_retries(1.0)``) and ``u`` reported."""
        u = require_unit_interval("u", u)
        constants = {name: _Held(getattr(self, name)(u)) for name in _ACTUATORS}
        return dataclasses.replace(self, hold=u, **constants)

    def reported(self, u: float) -> float:
        """The control signal a reader is told: the held value, else ``u`` itself."""
        return u if self.hold is None else self.hold

    def __call__(self, u: float) -> ActuatorSettings:
        u = _clip_u(u) if self.hold is None else self.hold
        return ActuatorSettings(
            u=u,
            feedback_intensity=self.feedback_intensity(u),
            strictness=self.strictness(u),
            retry_delay_ms=self.retry_delay_ms(u),
            timeout_ms=self.timeout_ms(u),
            max_retries=self.max_retries(u),
            rung=self.rung(u),
            votes=self.votes(u),
            context=self.context(u),
        )


_ACTUATORS = (
    "feedback_intensity",
    "strictness",
    "retry_delay_ms",
    "timeout_ms",
    "max_retries",
    "rung",
    "votes",
    "context",
)


@dataclass(frozen=True, slots=True)
class _Held(Generic[T]):
    """An actuator schedule frozen at one value: ``value`` at every u."""

    value: T

    def __call__(self, _u: float) -> T:
        return self.value


def reported_u(schedule: Callable[[float], ActuatorSettings], u: float) -> float:
    """The control signal a reader of ``schedule``'s settings is told: the held value of a
    held :class:`ActuatorSchedule`, else ``u`` (any other schedule callable)."""
    return schedule.reported(u) if isinstance(schedule, ActuatorSchedule) else u
