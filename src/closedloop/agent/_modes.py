"""Three control granularities (ReAct, Yao et al. 2023, and two planners) over one ``Run``.

``react``: every step the model sees the newest observations and proposes one action.
``plan_execute``: the model writes a structured, validated plan; code runs it step by
step; the model comes back only to replan (counted and bounded) and to answer.
``plan_review``: planner, executor and reviewer; the reviewer (code or a model) checks
each step's completion condition and can send the step back.
"""

from __future__ import annotations

from ._actions import action_schema
from ._loop import Run
from ._plan import plan_step
from ._records import StepRecord
from ._steps import ask, handle, visible_tools

__all__ = ["MODES", "react_step", "step"]

MODES = ("react", "plan_execute", "plan_review")


async def react_step(run: Run) -> StepRecord:
    """One ReAct step: propose, validate, act, observe."""
    run.state.phase = run.phase_for_react()
    visible = visible_tools(run)
    required = run.task.required_fields
    key = "propose:react"
    reply = await ask(
        run,
        frozenset({"tool", "final"}),
        lambda strict: action_schema(visible, required, strict=strict),
        key,
    )
    return await handle(run, reply, key, run.state.phase)


async def step(run: Run) -> StepRecord:
    """One step of the run's mode."""
    if run.settings.mode == "react":
        return await react_step(run)
    return await plan_step(run)
