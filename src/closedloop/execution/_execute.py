"""One action, one call: :func:`execute` and :func:`execute_sync` over a fresh ``Executor``.

For code that runs a single action and keeps no executor (no registered actions, no
event hook); the loop and the service hold an :class:`~closedloop.execution.Executor`.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, ParamSpec, TypeVar

from .._policy import RetryPolicy
from ._action import AtomicAction, Confirmation
from ._executor import Executor, Sleep
from ._ledger import EffectLedger
from ._outcome import ActionOutcome

__all__ = ["execute", "execute_sync"]

_P = ParamSpec("_P")
_T = TypeVar("_T")


async def execute(
    action: AtomicAction,
    args: Mapping[str, Any] | None = None,
    *,
    ledger: EffectLedger | None,
    task_id: str,
    step: int,
    confirmation: Confirmation | None = None,
    retry: RetryPolicy | None = None,
    state: Mapping[str, Any] | None = None,
    sleep: Sleep = asyncio.sleep,
    rng: random.Random | None = None,
) -> ActionOutcome:
    """Run one action once through a fresh :class:`Executor` (see its ``execute``)."""
    executor = Executor(ledger, sleep=sleep, rng=rng)
    return await executor.execute(
        action,
        args,
        task_id=task_id,
        step=step,
        confirmation=confirmation,
        retry=retry,
        state=state,
    )


def _in_a_new_loop(fn: Callable[_P, Coroutine[Any, Any, _T]]) -> Callable[_P, _T]:
    """``fn`` for code without an event loop: the same arguments, run to its end."""

    def run(*args: _P.args, **kwargs: _P.kwargs) -> _T:
        return asyncio.run(fn(*args, **kwargs))

    return run


execute_sync = _in_a_new_loop(execute)
execute_sync.__name__ = execute_sync.__qualname__ = "execute_sync"
execute_sync.__doc__ = """:func:`execute` for code without an event loop (the same arguments)."""
