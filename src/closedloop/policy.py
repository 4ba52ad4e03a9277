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

from . import _policy, _policy_state, _retrying, _wait
from ._policy import *  # noqa: F403
from ._policy_state import *  # noqa: F403
from ._retrying import *  # noqa: F403
from ._wait import *  # noqa: F403

# Each name is listed once, in the module that defines it; this module is their union.
__all__: list[str] = []
__all__ += _policy.__all__
__all__ += _policy_state.__all__
__all__ += _retrying.__all__
__all__ += _wait.__all__
# In the order a literal list here would have: constants, classes, then functions.
__all__.sort(key=lambda name: (not name.isupper(), not name[:1].isupper(), name))
