"""Acting on the estimate: settings that let what the loop measures change what it does.

The loop estimates more than it uses: the total disturbance f_est of the extended state
observer (Han 2009), each tool's circuit breaker (Nygard 2007), a service's own
``Retry-After``. Two settings here turn those estimates into actions; both are off unless
given, and each action a run takes is written into its step's record (the ``acted`` entry
of :attr:`~closedloop.agent.StepRecord.actuators`, and a note):

* :class:`StormWait` (on :class:`~closedloop.agent.ReadRetry`): a read answered 429
  with a ``Retry-After`` is asked again after that long (within the run's deadline and a
  time budget per call), and the refused attempt is not counted against the call's
  attempts: the service said when to come back (RFC 9110, ``Retry-After``), so backing
  off on the controller's schedule would spend attempts inside the storm on answers known
  in advance.
* :class:`EarlyHandover` (on :class:`~closedloop.agent.ControlConfig`): before a tool
  call runs, the task is handed to a human when the estimate says it cannot finish
  within what the run has left: the chance that one of the steps left succeeds, each
  failing with probability f_est, is below ``min_chance``; or the tool's breaker is open
  and does not let a probe through before the steps left (at the run's pace) or the
  deadline run out.

The settings and the projection live here; ``_early.py`` reads a run and asks it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .._validation import require_int_at_least, require_positive, require_unit_interval

__all__ = ["EarlyHandover", "StormWait", "finish_chance", "handover_reason"]


@dataclass(frozen=True, slots=True, kw_only=True)
class StormWait:
    """Wait out a 429 storm instead of spending attempts on it (see the module).

    A read answered 429 with a ``Retry-After`` is asked again after that long (at most
    ``max_wait_s``; never past the run's deadline), and the refused attempt is not
    counted. The waits of one call add up to at most ``max_total_s`` (and, if set, number
    at most ``max_waits``): the time budget bounds a storm that does not end, not a guess
    at how many refusals it holds. Past either bound a 429 is an ordinary passing fault.
    """

    max_wait_s: float = 30.0
    max_total_s: float = 60.0
    max_waits: int | None = None

    def __post_init__(self) -> None:
        require_positive("max_wait_s", self.max_wait_s)
        require_positive("max_total_s", self.max_total_s)
        if self.max_waits is not None:
            require_int_at_least("max_waits", self.max_waits, 1)

    def delay_s(self, retry_after_s: float) -> float:
        """How long one 429 with ``retry_after_s`` is waited out."""
        return min(max(0.0, float(retry_after_s)), self.max_wait_s)

    def allows(self, waits: int, waited_s: float, delay_s: float) -> bool:
        """Whether one more wait of ``delay_s`` fits after ``waits`` waits of
        ``waited_s`` seconds in all, in the same call."""
        if self.max_waits is not None and waits >= self.max_waits:
            return False
        return waited_s + delay_s <= self.max_total_s


@dataclass(frozen=True, slots=True, kw_only=True)
class EarlyHandover:
    """Hand a task over as soon as the estimate says it cannot finish (see the module).

    ``level``: the least f_est at which the projection is made at all (None: the
    manual-handover threshold, the last of ``ControlConfig.protocol_thresholds``), so a
    calm run is never handed over on a projection. ``min_chance``: the handover happens
    when ``1 - f_est ** steps_left`` falls below it. ``breaker``: also hand over when the
    proposed tool's breaker is open past what the run has left.
    """

    level: float | None = None
    min_chance: float = 0.5
    breaker: bool = True

    def __post_init__(self) -> None:
        if self.level is not None:
            require_unit_interval("level", self.level)
        require_unit_interval("min_chance", self.min_chance)


def finish_chance(f_est: float, steps_left: int) -> float:
    """The chance that at least one of ``steps_left`` steps succeeds, each failing with
    probability ``f_est`` (the estimate read as a failure rate, steps independent)."""
    if steps_left <= 0:
        return 0.0
    f = min(1.0, max(0.0, f_est))
    return 1.0 - f**steps_left


def handover_reason(
    settings: EarlyHandover,
    *,
    f_est: float,
    level: float,
    steps_left: int,
    time_left_s: float,
    step_s: float | None,
    breaker_wait_s: float | None,
    tool: str | None,
) -> str | None:
    """Why the task is handed over now, or None to go on.

    ``level`` is the f_est threshold when ``settings.level`` is None; ``steps_left``
    counts the step about to run; ``step_s`` is the run's mean step duration so far (None
    before the first step); ``breaker_wait_s`` how long the proposed ``tool``'s open
    breaker still refuses calls (None: closed, or no breaker).
    """
    usable = steps_left
    if step_s is not None and step_s > 0 and math.isfinite(time_left_s):
        usable = min(usable, int(max(0.0, time_left_s) // step_s))
    if settings.breaker and breaker_wait_s is not None and tool is not None:
        # The steps left run at the run's pace; a refused call takes no time of its own,
        # so the loop would spend them all before the breaker lets a probe through.
        horizon = time_left_s if step_s is None else min(time_left_s, usable * step_s)
        if breaker_wait_s >= horizon:
            return (
                f"early handover: {tool}'s breaker is open for {breaker_wait_s:.1f} s more, "
                f"past what the run has left ({usable} step(s), {max(0.0, time_left_s):.1f} s)"
            )
    threshold = level if settings.level is None else settings.level
    if f_est < threshold:
        return None
    chance = finish_chance(f_est, usable)
    if chance >= settings.min_chance:
        return None
    return (
        f"early handover: f_est {f_est:.2f} >= {threshold:.2f}; the chance that one of the "
        f"{usable} step(s) left succeeds is {chance:.2f} < {settings.min_chance:.2f}"
    )
