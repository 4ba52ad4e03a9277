"""The loop, top to bottom: one step, and a run driven to its end.

A step is eight stages, each a function of the values the ones before returned::

    project  ─► View         what the mode asks, the proposing key's settings, the tools shown
    propose  ─► ModelReply   a proposal made in code, the frozen action, a rule's call or the model's
    decide   ─► Decided      refuse, skip, repeat, hand over, answer, or run the tool
    act      ─► Acted        the tool run through the tool port, an answer accepted, a freeze
    measure  ─► Outcome      e ∈ [0, 1], the plan's judgement, the edits of the task state
    control  ─► Controlled   PID update(s) → u → the next step's Actuators; ESO → f_est → protocol
    fold     ─► HaltReason   the task state written (``_fold.py``, its one writer); the ends
    record   ─► StepRecord   kept by ``Run.commit``: the trace, then the state saved or the run ended

What the step hands the next (u with the errors that made it, a rule's advice, a human's
confirmation) is the :class:`~closedloop.agent._view.Carry` it returns; the modes
(``_modes.py``) are arrangements of the same stages. Every way out of :func:`drive` is a
recorded end: the last step's halt, a stop before the first step, the caller walking away
(``cancelled``) or an exception (``error``, in the result; only a ``BaseException`` such
as ``KeyboardInterrupt`` is re-raised). What the tools share for the run (their ``scope``)
is entered before the first step and left on every one of these ways out.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from ._act import act
from ._close import carried, control, fold, record
from ._decide import decide
from ._halt_error import end_with_error
from ._measure import measure
from ._modes import mode_for
from ._propose import propose
from ._records import HaltReason, StepRecord
from ._run import Run
from ._view import Carry, Mode, project

__all__ = ["drive", "step"]


async def step(run: Run, mode: Mode, carry: Carry) -> tuple[StepRecord, Carry]:
    """One step of ``mode``, from what the last step handed on; returns its record and
    what it hands the next."""
    view = await project(run, mode, carry)
    reply = await propose(run, view)
    decided = await decide(run, view, reply)
    acted = await act(run, view, reply, decided)
    outcome = await measure(run, view, reply, acted)
    ctl = await control(run, view, outcome)
    halt = fold(run, outcome, ctl)
    kept = record(run, view, outcome, ctl, halt)
    await run.commit(kept)
    return kept, carried(view, outcome, ctl)


async def drive(run: Run, carry: Carry | None = None) -> AsyncIterator[StepRecord]:
    """Drive ``run`` to its end from ``carry`` (a resumed or recovered run's start)."""
    mode, carry = mode_for(run.settings.mode), carry or Carry()
    scopes = contextlib.AsyncExitStack()
    try:
        try:
            seen: set[int] = set()
            for scope in (t.scope for t in run.settings.tools.values() if t.scope is not None):
                if id(scope) not in seen:
                    seen.add(id(scope))
                    await scopes.enter_async_context(scope.run_scope())
            if (halt := run.stop_reason()) is not None:
                await run.finish(halt)
            while run.result is None:
                kept, carry = await step(run, mode, carry)
                yield kept
        except (GeneratorExit, asyncio.CancelledError):
            if run.result is None:
                with contextlib.suppress(Exception):
                    await run.finish(
                        HaltReason.CANCELLED, message="the run was stopped from outside"
                    )
            raise
        except Exception as exc:  # every exception inside a run ends it as error, in the result
            await end_with_error(run, exc)
        except BaseException as exc:
            if run.result is None:
                with contextlib.suppress(Exception):
                    await run.finish(HaltReason.ERROR, message=f"{type(exc).__name__}: {exc}")
            raise
    finally:
        await scopes.aclose()  # the tools' shared resources, on every way out
