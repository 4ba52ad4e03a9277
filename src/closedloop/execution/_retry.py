"""The executor's retry policy: the one policy algebra of :mod:`closedloop.policy`.

The names below are the ones this package exported before the algebra was shared; they
are kept as deprecated aliases for one release (``docs/migration.md`` maps each to its
new name). New code imports from :mod:`closedloop.policy`.
"""

from __future__ import annotations

from .._policy import (
    PROGRAMMING_ERRORS,
    AllOf,
    AnyOf,
    Policy,
    PolicyState,
    RetryPolicy,
    Wait,
    WaitSum,
    retry_if_exception,
    retry_if_exception_type,
    retry_never,
    stop_after_attempt,
    stop_after_backoff,
    wait_exponential,
    wait_fixed,
    wait_jitter,
    wait_none,
    wait_random,
)

__all__ = [
    "PROGRAMMING_ERRORS",
    "RetryIf",
    "RetryIfAll",
    "RetryIfAny",
    "RetryIfException",
    "RetryIfPredicate",
    "RetryNever",
    "RetryPolicy",
    "RetryState",
    "Stop",
    "StopAfterAttempt",
    "StopAfterDelay",
    "StopAll",
    "StopAny",
    "Wait",
    "WaitExponential",
    "WaitFixed",
    "WaitFullJitter",
    "WaitNone",
    "WaitRandom",
    "WaitSum",
]

# Deprecated aliases (one release): old name = new name.
RetryState = PolicyState
Stop = Policy
RetryIf = Policy
StopAny = AnyOf
StopAll = AllOf
RetryIfAny = AnyOf
RetryIfAll = AllOf
StopAfterAttempt = stop_after_attempt
StopAfterDelay = stop_after_backoff
RetryIfException = retry_if_exception_type
RetryIfPredicate = retry_if_exception
RetryNever = retry_never
WaitNone = wait_none
WaitFixed = wait_fixed
WaitExponential = wait_exponential
WaitRandom = wait_random
WaitFullJitter = wait_jitter
