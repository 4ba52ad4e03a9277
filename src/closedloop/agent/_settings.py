"""What an :class:`~closedloop.agent.Agent` fixes for all of its runs, as one frozen value.

Kept apart from the run (``_run.py``) so that the two ports of a step
(``_model_port.py``, ``_tool_port.py``) can name the settings without importing the run
that owns them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..execution import Secret
from ..feedback import EventBus
from ..models import Model, ModelLadder
from ._control_config import ControlConfig
from ._projection import ProjectionOptions
from ._reads import ReadRetry
from ._stop import StopPolicy
from ._tools import Tool

__all__ = ["LoopSettings", "Sleep"]

Sleep = Callable[[float], Awaitable[None]]


@dataclass(frozen=True, slots=True, kw_only=True)
class LoopSettings:
    """Everything an :class:`~closedloop.agent.Agent` fixes for its runs."""

    model: Model
    tools: Mapping[str, Tool]
    mode: str
    max_steps: int
    deadline_s: float
    stop: StopPolicy
    control: ControlConfig
    max_tokens: int
    temperature: float
    seed: int
    native: bool
    verifier: Model | None
    dual_temperature: float
    reviewer: Any  # a _review.Reviewer or ModelReviewer
    max_replans: int
    max_plan_steps: int
    max_sendbacks: int
    repeat_window: int
    observation_chars: int
    keep_observations: int
    projection: ProjectionOptions
    format_answer: Callable[[str, Mapping[str, Any]], str] | None
    clock: Callable[[], float]
    wall_clock: Callable[[], float]
    sleep: Sleep
    read_retry: ReadRetry = field(default_factory=ReadRetry)
    ladder: ModelLadder | None = None  # the model ladder; ``model`` is its cheapest rung
    secrets: tuple[Secret, ...] = ()  # resolved at call time by the tool port
    events: EventBus | None = None  # fault events published, healing actions applied
    logprobs: bool = False  # ask each model call for token logprobs (the confidence sensor)
