"""The option groups of an :class:`~closedloop.agent.Agent`, each a frozen value.

An agent is a model, its tools and a handful of these values: how the loop is arranged
(``ReAct``, ``PlanExecute``, ``PlanReview``), how the model is asked (``ModelSettings``),
when a run must end at the latest (``RunLimits``), what the task state keeps and shows
(``ContextSettings``) and the side effects it runs on (``Runtime``). The controllers'
gains and thresholds stay in :class:`~closedloop.agent.ControlConfig`. Every field is
checked when the value is built, and a bad one is named with the value given.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from .._exceptions import ConfigurationError
from .._validation import (
    require_int_at_least,
    require_non_negative,
    require_positive,
    require_temperature,
)
from ..execution import Secret
from ..feedback import EventBus, StateStore
from ..models import Model
from ._review import ModelReviewer, Reviewer
from ._stop import StopFn, StopPolicy, stop_on_no_progress, stop_on_repeats
from ._trace import TraceSink

__all__ = [
    "DEFAULT_STOP",
    "ContextSettings",
    "Mode",
    "ModelSettings",
    "PlanExecute",
    "PlanReview",
    "ReAct",
    "RunLimits",
    "Runtime",
    "Trace",
    "mode_of",
]

ToolCalling = Literal["auto", "native", "json"]

DEFAULT_STOP: StopPolicy = stop_on_no_progress(3) | stop_on_repeats(2)
"""The stop policy of ``RunLimits()``: three steps without new information, or the same
action proposed a third time, end the run."""

Trace = TraceSink | str | os.PathLike[str] | bool | None
"""Where a run's steps go: a ``TraceSink``, a JSONL path, ``False`` for none, or ``True``
(the same as ``None``) for a JSONL file per run."""


# --- the arrangement of the loop --------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ReAct:
    """Reason and act (Yao et al. 2023): each step the model sees the newest
    observations and proposes one action."""

    name: ClassVar[str] = "react"


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanExecute:
    """Plan and execute: the model writes a validated plan of at most ``max_plan_steps``
    steps, code runs it, and the model comes back only to replan (at most ``max_replans``
    times) and to answer."""

    name: ClassVar[str] = "plan_execute"
    max_replans: int = 2
    max_plan_steps: int = 8

    def __post_init__(self) -> None:
        require_int_at_least("max_replans", self.max_replans, 0)
        require_int_at_least("max_plan_steps", self.max_plan_steps, 1)


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanReview:
    """Planner, executor and reviewer: as :class:`PlanExecute`, and a reviewer (code, or
    a :class:`ModelReviewer`) checks each step's completion condition and may send the step
    back up to ``max_sendbacks`` times. ``reviewer=None`` is ``code_reviewer()``."""

    name: ClassVar[str] = "plan_review"
    max_replans: int = 2
    max_plan_steps: int = 8
    max_sendbacks: int = 2
    reviewer: Reviewer | ModelReviewer | None = None

    def __post_init__(self) -> None:
        require_int_at_least("max_replans", self.max_replans, 0)
        require_int_at_least("max_plan_steps", self.max_plan_steps, 1)
        require_int_at_least("max_sendbacks", self.max_sendbacks, 0)
        reviewer = self.reviewer
        if not (reviewer is None or isinstance(reviewer, ModelReviewer) or callable(reviewer)):
            raise ConfigurationError("reviewer", self.reviewer, "must be callable or None")


Mode = ReAct | PlanExecute | PlanReview

_MODE_NAMES: dict[str, type[ReAct] | type[PlanExecute] | type[PlanReview]] = {
    "react": ReAct,
    "plan_execute": PlanExecute,
    "plan_review": PlanReview,
}


def mode_of(value: Mode | str) -> Mode:
    """A mode value; a mode's name (``"react"``, ...) is that mode with its defaults."""
    if isinstance(value, ReAct | PlanExecute | PlanReview):
        return value
    if isinstance(value, str) and value in _MODE_NAMES:
        return _MODE_NAMES[value]()
    raise ConfigurationError(
        "mode",
        value,
        f"must be ReAct(), PlanExecute(), PlanReview() or one of {', '.join(_MODE_NAMES)}",
    )


# --- how the model is asked -----------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSettings:
    """How every model call of a run is made.

    ``tool_calling``: ``"native"`` sends the tools in the provider's own format, ``"json"``
    asks for a JSON action in the text, ``"auto"`` picks native where the model supports
    it. ``verifier`` is the second model of dual verification (default: the agent's model
    again, at ``dual_temperature``). ``logprobs`` asks every call for its tokens'
    log-probabilities, read into each step's ``confidence`` (and the confidence-gated
    actuators of :class:`Sampling`); ``"auto"``, the default, asks where a model of the
    agent says it gives them (``supports_logprobs``: the embedded models and
    OpenAI-compatible servers), which costs about 2 % of an embedded call.
    """

    max_tokens: int = 512
    temperature: float = 0.0
    seed: int = 0
    tool_calling: ToolCalling = "auto"
    verifier: Model | str | None = None
    dual_temperature: float = 0.7
    logprobs: bool | Literal["auto"] = "auto"

    def __post_init__(self) -> None:
        require_int_at_least("max_tokens", self.max_tokens, 1)
        if not isinstance(self.logprobs, bool) and self.logprobs != "auto":
            raise ConfigurationError("logprobs", self.logprobs, "must be True, False or auto")
        require_temperature("temperature", self.temperature)
        require_int_at_least("seed", self.seed, 0)
        if self.tool_calling not in ("auto", "native", "json"):
            raise ConfigurationError(
                "tool_calling", self.tool_calling, "must be auto, native or json"
            )
        if self.verifier is not None and not isinstance(self.verifier, Model | str):
            raise ConfigurationError(
                "verifier", self.verifier, "must be a Model, a model spec string or None"
            )
        require_temperature("dual_temperature", self.dual_temperature)


# --- when a run must end ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class RunLimits:
    """When a run ends: the hard limits, and one stop policy on top of them.

    ``max_steps`` ends the run with ``step_limit``, ``deadline_s`` (seconds of the run's
    clock) with ``deadline``. ``tokens`` and ``cost`` give each run a fresh budget that ends
    it with ``budget``; a ``Budget`` passed to ``run(budget=...)`` replaces it (one account
    shared by several runs). ``stop`` is a :class:`StopPolicy` (or a function of the loop
    state) that may end a run earlier; its default is ``stop_on_no_progress(3) |
    stop_on_repeats(2)`` (``DEFAULT_STOP``), and ``None`` leaves only the hard limits.
    """

    max_steps: int = 12
    deadline_s: float = 120.0
    tokens: int | None = None
    cost: float | None = None
    stop: StopPolicy | StopFn | None = DEFAULT_STOP

    def __post_init__(self) -> None:
        if self.stop is not None and not callable(self.stop):
            raise ConfigurationError("stop", self.stop, "must be a StopPolicy, a function or None")
        require_int_at_least("max_steps", self.max_steps, 1)
        require_positive("deadline_s", self.deadline_s)
        if self.tokens is not None:
            require_int_at_least("tokens", self.tokens, 1)
        if self.cost is not None:
            require_non_negative("cost", self.cost)


# --- what the task state keeps and shows ------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ContextSettings:
    """What the structured task state must hold, keeps, and shows the model.

    ``required_fields`` are the fields code checks before a final answer is accepted
    (names, ``RequiredField``s or a pydantic model; a ``Task`` may bring its own).
    ``format_answer(answer, fields)`` renders the accepted answer. Each observation is cut
    to ``observation_chars`` characters; the state keeps the last ``keep_observations``
    of them and the prompt shows the last ``context_observations``. The repeat detector
    compares an action with the last ``repeat_window`` ones.
    """

    required_fields: Any = None
    format_answer: Callable[[str, Mapping[str, Any]], str] | None = None
    observation_chars: int = 1500
    keep_observations: int = 24
    context_observations: int = 4
    repeat_window: int = 8

    def __post_init__(self) -> None:
        if self.format_answer is not None and not callable(self.format_answer):
            raise ConfigurationError("format_answer", self.format_answer, "must be callable")
        require_int_at_least("observation_chars", self.observation_chars, 64)
        require_int_at_least("keep_observations", self.keep_observations, 1)
        require_int_at_least("context_observations", self.context_observations, 0)
        require_int_at_least("repeat_window", self.repeat_window, 1)


# --- the side effects a run uses ----------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Runtime:
    """The side effects a run is built on, injectable so tests never wait.

    ``clock`` measures the run's time (deadlines, ``dt``), ``wall_clock`` stamps
    observations, ``sleep`` waits between retries and for the deadline. ``trace_dir`` is
    where a run's default JSONL trace goes (default: the runs folder under
    ``CLOSEDLOOP_HOME``). ``events`` is an :class:`~closedloop.feedback.EventBus` the
    tool port publishes each failed attempt's fault event on (a 5xx, a timeout, a 429, a
    drifted answer), applying the healing actions its handlers answer with; None, the
    default: no events, the loop acts on its own estimates only.

    ``store`` keeps task state, the controllers' history and the handover queue (default:
    one ``MemoryStore`` per agent). ``trace`` is where each run's steps go (:data:`Trace`;
    the default writes ``trace.jsonl`` under ``trace_dir/<run_id>/``, or under the runs
    folder of ``$CLOSEDLOOP_HOME``, default ``~/.cache/closedloop``). ``secrets`` are the
    :class:`~closedloop.execution.Secret`s the tools may need: the model is told their
    references (``{{secret:API_TOKEN}}``), the tool receives the value at the call, and
    nothing else ever holds it (docs/how-to/secrets.md).
    """

    clock: Callable[[], float] = time.monotonic
    wall_clock: Callable[[], float] = time.time
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    trace_dir: str | os.PathLike[str] | None = None
    events: EventBus | None = None
    store: StateStore | None = None
    trace: Trace = None
    secrets: Iterable[Secret] = ()

    def __post_init__(self) -> None:
        if self.store is not None and not isinstance(self.store, StateStore):
            raise ConfigurationError("store", self.store, "must be a StateStore or None")
        if isinstance(self.secrets, Secret | str) or not isinstance(self.secrets, Iterable):
            raise ConfigurationError("secrets", self.secrets, "must be a list of Secret values")
        object.__setattr__(self, "secrets", tuple(self.secrets))
        for name in ("clock", "wall_clock", "sleep"):
            value = getattr(self, name)
            if not callable(value):
                raise ConfigurationError(name, value, "must be callable")
        if self.trace_dir is not None and not isinstance(self.trace_dir, str | os.PathLike):
            raise ConfigurationError("trace_dir", self.trace_dir, "must be a path or None")
        if self.events is not None and not isinstance(self.events, EventBus):
            raise ConfigurationError("events", self.events, "must be an EventBus or None")
