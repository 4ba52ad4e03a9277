"""The loop's own retry of a failed read, driven by the step's actuator settings.

The executor retries exceptions. A read tool that *answers* with a failure (a 503, a
timeout, a 429 observation) is not an exception, so without this the model would see
the failure and the repeat guard would refuse the model's identical second try. Here a
read (an action whose effect class is ``recomputable``) whose answer is a passing fault
is asked again, up to ``max_retries`` of the settings the PID scheduled for the tool,
``retry_delay_ms`` apart (a 429's ``retry_after_s`` wins when longer, capped). An
``empty`` answer is checked once more when the tool's error signal is high or it failed
recently: an empty list served by a fault reads exactly like a real "no match". With a
:class:`~closedloop.agent.StormWait` (``storm``), a 429 that says when to come back
(``Retry-After``) is waited out that long and does not use up an attempt.

:class:`ReadRetry` is a retry condition of the shared policy algebra
(:mod:`closedloop.policy`) over a state whose outcome is the observation;
:meth:`ReadRetry.retry_policy` is the whole retry policy for one read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .._exceptions import ConfigurationError
from .._policy import Policy, RetryPolicy, stop_after_attempt
from .._policy_state import NO_DRAWS, PolicyState
from .._validation import require_int_at_least, require_non_negative
from .._wait import Wait
from ..perception import Observation, ObservationStatus
from ._acting import StormWait

__all__ = ["ReadRetry", "http_status", "is_transient", "wait_retry_after"]

_HTTP = re.compile(r"\bHTTP (\d{3})\b")
_UNREACHABLE = ("could not be reached", "connection refused", "connection reset", "unreachable")


def http_status(observation: Observation) -> int | None:
    """The HTTP status a failed answer names (``HTTP 503`` in its error or meaning), or None."""
    code = _HTTP.search(f"{observation.error or ''} {observation.meaning}")
    return None if code is None else int(code.group(1))


def is_transient(observation: Observation) -> bool:
    """A passing fault worth asking again: a timeout, a 429, a 5xx, no connection.

    A 4xx is a definite answer (the request itself is wrong) and is not retried. A
    ``stale`` answer served in place of a failed call counts when it carries a 5xx.
    """
    status = observation.status
    if status in (ObservationStatus.TIMEOUT, ObservationStatus.RATE_LIMITED):
        return True
    if status not in (ObservationStatus.ERROR, ObservationStatus.STALE):
        return False
    code = http_status(observation)
    if code is not None:
        return code >= 500
    lowered = f"{observation.error or ''} {observation.meaning}".lower()
    return status is ObservationStatus.ERROR and any(m in lowered for m in _UNREACHABLE)


@dataclass(frozen=True, slots=True)
class wait_retry_after(Wait):
    """The scheduled delay, or a 429's longer ``retry_after_s`` capped at ``max_s``."""

    scheduled_s: float
    max_s: float = 5.0

    def __post_init__(self) -> None:
        require_non_negative("scheduled_s", self.scheduled_s)
        require_non_negative("max_s", self.max_s)

    def __call__(self, state: PolicyState) -> float:
        delay = self.scheduled_s
        answer = state.outcome
        if (
            isinstance(answer, Observation)
            and answer.status is ObservationStatus.RATE_LIMITED
            and answer.retry_after_s
        ):
            delay = max(delay, min(float(answer.retry_after_s), self.max_s))
        return delay


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadRetry(Policy[str]):
    """How the loop retries a read whose answer is a passing fault: a retry condition.

    Called on a state, it fires (with the reason) when the state's outcome is an
    observation worth asking again.

    ``enabled=False`` turns it off (the executor still retries exceptions). ``partial``
    also retries answers that lost key fields (schema drift). ``max_backoff_s`` caps a
    429's ``retry_after_s``. ``recheck_empty`` asks an ``empty`` read once more when the
    tool's error signal (its control output or its last error) is at least
    ``empty_error`` or it had a passing fault in the last ``recent_steps`` steps. ``repeats_after_fault``: how many times the model
    may propose the same read again, right after it failed with a passing fault, without
    the repeat guard refusing it (a real loop still stops after that). ``storm``: wait out
    a 429 with a ``Retry-After`` without counting the attempt (:class:`StormWait`; None,
    the default: a 429 is a passing fault like a 5xx).
    """

    enabled: bool = True
    partial: bool = False
    max_backoff_s: float = 5.0
    recheck_empty: bool = True
    empty_error: float = 0.5
    recent_steps: int = 3
    repeats_after_fault: int = 2
    storm: StormWait | None = None

    def __post_init__(self) -> None:
        if self.storm is not None and not isinstance(self.storm, StormWait):
            raise ConfigurationError("storm", self.storm, "must be a StormWait or None")
        require_non_negative("max_backoff_s", self.max_backoff_s)
        require_non_negative("empty_error", self.empty_error)
        require_int_at_least("recent_steps", self.recent_steps, 0)
        require_int_at_least("repeats_after_fault", self.repeats_after_fault, 0)

    def __call__(self, state: PolicyState) -> str | None:
        answer = state.outcome
        if not self.enabled or state.error is not None or not isinstance(answer, Observation):
            return None
        if self.partial and answer.status is ObservationStatus.PARTIAL:
            return "partial answer"
        return "passing fault" if is_transient(answer) else None

    def should_retry(self, observation: Observation) -> bool:
        """Whether this answer is a passing fault this policy asks again."""
        return self(PolicyState(outcome=observation, rng=NO_DRAWS)) is not None

    def storm_delay_s(self, observation: Observation) -> float | None:
        """How long this answer is waited out as a 429 storm (``storm`` set, a 429 with a
        ``Retry-After``), or None: it is not."""
        after = observation.retry_after_s
        if (
            self.storm is None
            or not self.enabled
            or observation.status is not ObservationStatus.RATE_LIMITED
            or after is None
            or after < 0
        ):
            return None
        return self.storm.delay_s(after)

    def wait(self, scheduled_ms: float) -> Wait:
        """The wait before the next attempt, given the delay the controller scheduled."""
        return wait_retry_after(max(0.0, scheduled_ms / 1000.0), self.max_backoff_s)

    def delay_s(self, observation: Observation, scheduled_ms: float) -> float:
        """The wait before the next attempt: the scheduled delay, or a longer Retry-After."""
        return self.wait(scheduled_ms)(PolicyState(outcome=observation))

    def retry_policy(self, attempts: int, scheduled_ms: float) -> RetryPolicy:
        """The whole policy for one read: up to ``attempts`` attempts, this condition, the
        scheduled wait (a driver in :mod:`closedloop.policy` runs it)."""
        return RetryPolicy(stop_after_attempt(attempts), self.wait(scheduled_ms), self)
