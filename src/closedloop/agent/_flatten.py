"""An agent's option groups flattened into the one ``LoopSettings`` value its loop reads.

The groups are what a user tunes (``_options.py``, ``ControlConfig``); the loop reads one
frozen value, so no stage looks at a group or at the mode's class.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal

from ..execution import Secret
from ..models import Model, ModelLadder, OpenAICompatible
from ._control_config import ControlConfig
from ._options import (
    ContextSettings,
    Mode,
    ModelSettings,
    PlanExecute,
    PlanReview,
    RunLimits,
    Runtime,
)
from ._projection import ProjectionOptions
from ._review import code_reviewer
from ._settings import LoopSettings
from ._stop import as_stop_policy, stop_after_steps
from ._tools import Tool

__all__ = ["flatten"]


Groups = tuple[ModelSettings, RunLimits, ContextSettings, ControlConfig, Runtime]


def flatten(
    model: Model,
    tools: Mapping[str, Tool],
    mode: Mode,
    groups: Groups,
    *,
    instructions: str,
    ladder: ModelLadder | None,
    secrets: tuple[Secret, ...],
    format_answer: Callable[[str, Mapping[str, Any]], str] | None,
    verifier: Model | None,
) -> LoopSettings:
    """An agent's option groups as the one settings value its loop reads."""
    ms, limits, ctx, control, rt = groups
    policy = stop_after_steps(limits.max_steps)
    if limits.stop is not None:
        policy = policy | as_stop_policy(limits.stop)
    native = ms.tool_calling == "native" or (
        ms.tool_calling == "auto"
        and (
            isinstance(model, OpenAICompatible)
            or bool(getattr(model, "supports_tool_calls", False))
        )
    )
    plan = mode if isinstance(mode, PlanExecute | PlanReview) else PlanExecute()
    reviewer = mode.reviewer if isinstance(mode, PlanReview) else None
    return LoopSettings(
        model=model,
        tools=tools,
        mode=mode.name,
        max_steps=limits.max_steps,
        deadline_s=limits.deadline_s,
        stop=policy,
        control=control,
        max_tokens=ms.max_tokens,
        temperature=ms.temperature,
        seed=ms.seed,
        native=native,
        verifier=verifier,
        dual_temperature=ms.dual_temperature,
        logprobs=_asks_logprobs(ms.logprobs, ladder, model),
        reviewer=reviewer if reviewer is not None else code_reviewer(),
        max_replans=plan.max_replans,
        max_plan_steps=plan.max_plan_steps,
        max_sendbacks=mode.max_sendbacks if isinstance(mode, PlanReview) else 2,
        repeat_window=ctx.repeat_window,
        observation_chars=ctx.observation_chars,
        keep_observations=ctx.keep_observations,
        projection=ProjectionOptions(
            observations=ctx.context_observations, instructions=instructions
        ),
        format_answer=format_answer,
        clock=rt.clock,
        wall_clock=rt.wall_clock,
        sleep=rt.sleep,
        read_retry=control.read_retry,
        ladder=ladder if ladder is not None and len(ladder) > 1 else None,
        secrets=secrets,
        events=rt.events,
    )


def _asks_logprobs(
    setting: bool | Literal["auto"], ladder: ModelLadder | None, model: Model
) -> bool:
    """Whether model calls ask for logprobs: as set, or (auto) where a model gives them."""
    if isinstance(setting, bool):
        return setting
    models = [model] if ladder is None else [rung.model for rung in ladder.rungs]
    return any(bool(getattr(m, "supports_logprobs", False)) for m in models)
