"""The early-handover check on a run: what it has left, what it estimates (``_acting.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..feedback import CircuitState
from ._acting import handover_reason

if TYPE_CHECKING:
    from ._records import ActionCall
    from ._run import Run

__all__ = ["early_handover"]


def early_handover(run: Run, call: ActionCall | None) -> str | None:
    """Why ``run`` hands its task over before ``call`` runs (its settings'
    :class:`EarlyHandover`), or None: no setting, no tool call, or the estimate says go on.

    The reason goes into the step's record as an action taken on the estimate (``acted``).
    """
    settings = run.settings.control.early_handover
    if settings is None or call is None or run.state.step == 0:
        return None
    breaker_wait = None
    health = run.health
    if health is not None and call.tool in run.settings.tools:
        breaker = health.breaker(call.tool)
        if breaker.state is CircuitState.OPEN:
            now = run.settings.clock()
            breaker_wait = max(0.0, (breaker.retry_at or now) - now)
    elapsed = run.elapsed()
    return handover_reason(
        settings,
        f_est=run.control.f_est,
        level=run.settings.control.protocol_thresholds[-1],
        steps_left=run.settings.max_steps - run.state.step,
        time_left_s=run.deadline_s - elapsed,
        step_s=elapsed / run.state.step,
        breaker_wait_s=breaker_wait,
        tool=call.tool,
    )
