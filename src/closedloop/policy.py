"""Stop, retry and wait policies: one small language over one state snapshot.

::

    from closedloop.policy import (
        RetryPolicy, retry_async, retry_if_exception_type, stop_after_attempt,
        stop_after_delay, wait_exponential, wait_random,
    )

    policy = RetryPolicy(
        stop=stop_after_attempt(5) | stop_after_delay(30),
        wait=wait_exponential(0.1, 2.0, 5.0) + wait_random(0, 0.1),
        retry=retry_if_exception_type(OSError, TimeoutError),
    )
    result = (await retry_async(lambda n: fetch(), policy)).unwrap()

A condition (:class:`Policy`) returns the reason it fired or ``None``; ``|`` fires when
either part fires, ``&`` when both do. A :class:`Wait` returns seconds; ``+`` adds waits.
:meth:`RetryPolicy.decide` turns one :class:`PolicyState` into one
:class:`PolicyDecision` (attempt, wait or stop). The agent's stop policies
(``closedloop.stop_after_steps`` …), the executor's retries, the loop's read retry, the
refiner's stop policies and ``@controlled`` are all built from these.
"""

from __future__ import annotations

from ._policy import (
    PROGRAMMING_ERRORS,
    AllOf,
    AnyOf,
    Policy,
    PolicyDecision,
    PolicyState,
    RetryPolicy,
    Verdict,
    Wait,
    WaitSum,
    retry_if_exception,
    retry_if_exception_type,
    retry_if_result,
    retry_never,
    stop_after_attempt,
    stop_after_backoff,
    stop_after_delay,
    stop_never,
    stop_on_fact,
    wait_exponential,
    wait_fact,
    wait_fixed,
    wait_jitter,
    wait_none,
    wait_random,
    when,
)
from ._retrying import Observe, Retried, retry_async, retry_sync

__all__ = [
    "PROGRAMMING_ERRORS",
    "AllOf",
    "AnyOf",
    "Observe",
    "Policy",
    "PolicyDecision",
    "PolicyState",
    "Retried",
    "RetryPolicy",
    "Verdict",
    "Wait",
    "WaitSum",
    "retry_async",
    "retry_if_exception",
    "retry_if_exception_type",
    "retry_if_result",
    "retry_never",
    "retry_sync",
    "stop_after_attempt",
    "stop_after_backoff",
    "stop_after_delay",
    "stop_never",
    "stop_on_fact",
    "wait_exponential",
    "wait_fact",
    "wait_fixed",
    "wait_jitter",
    "wait_none",
    "wait_random",
    "when",
]
