"""Compare-and-set retries on the one retry driver: read, compute, write, again on a lost race.

An optimistic update reads a versioned value, computes the new one and writes it only if
the version is unchanged; a concurrent writer makes the write fail with
:class:`StaleStateError`, and the whole read-compute-write runs again at once on the fresh
value (optimistic concurrency control: Kung & Robinson 1981).
:func:`retry_on_conflict` is that loop as a preset of :mod:`closedloop.policy`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from ._exceptions import StaleStateError
from ._policy import Policy, RetryPolicy, retry_if_exception_type, stop_after_attempt
from ._policy_state import NO_DRAWS
from ._retrying import Retried, retry_async
from ._validation import require_int_at_least

__all__ = ["retry_on_conflict"]

T = TypeVar("T")


async def _at_once(_: float) -> None:
    """No backoff and no yield: a lost race is retried straight away, as a CAS loop is."""


async def retry_on_conflict(
    attempt: Callable[[int], Awaitable[T]],
    attempts: int,
    *,
    conflict: Policy[Any] | None = None,
) -> Retried[T]:
    """Run ``attempt(n)`` (n = 1, 2, …) again while it loses a race, at most ``attempts`` times.

    ``conflict`` says what a lost race is (default: the attempt raised
    :class:`StaleStateError`). Returns how it ended: the value, or, once every attempt lost,
    the last conflict (``unwrap()`` raises an error; a result conflict is the last value).
    Any other error the attempt raises is raised here.
    """
    require_int_at_least("attempts", attempts, 1)
    lost = retry_if_exception_type(StaleStateError) if conflict is None else conflict
    done = await retry_async(
        attempt,
        RetryPolicy(stop=stop_after_attempt(attempts), retry=lost),
        sleep=_at_once,
        rng=NO_DRAWS,  # a CAS loop waits for nothing: its policy draws nothing
    )
    if done.error is not None and done.reason is None:
        raise done.error  # not a lost race: no attempt after it
    return done
