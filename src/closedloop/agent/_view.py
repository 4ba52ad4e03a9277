"""What a step starts from (the value the last step handed on, the step's view) and
what its proposal stage hands on (:class:`ModelReply`).

:class:`Carry` is everything one step hands the next (and a run's start its first step):
the :class:`~closedloop.agent._actuators.Actuators` (u per key, and the errors that made
it), the rule the last failed read earned, a human's confirmation of the frozen action
until that action runs, and a note for the next record. The run keeps none of it.

:func:`project` is the first stage: the mode says what this step asks for (its
:class:`Ask`), and the step's :class:`View` adds the proposing key's settings and the
tools shown under them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from ..control import ActuatorSettings
from ..control import Protocol as DefenceProtocol
from ..decision import Decision
from ..execution import Confirmation
from ..models import Confidence
from ..perception import Observation
from ._actions import Proposal
from ._actuators import Actuators
from ._fold import Edit, Phase
from ._records import ActionCall, HaltReason, RunUsageSummary
from ._relevance import relevant_tools
from ._state import ObservationEntry
from ._tools import Tool

if TYPE_CHECKING:
    from ._run import Run

__all__ = [
    "NO_USAGE",
    "Ask",
    "Carry",
    "Judge",
    "Judged",
    "Mode",
    "ModelReply",
    "RuleAdvice",
    "Schema",
    "View",
    "project",
    "visible_tools",
]

NO_USAGE = RunUsageSummary()

Schema = Callable[[Sequence[Tool], bool], Mapping[str, Any]]
"""The response schema of a proposal: of the tools shown, strict (the grammar) or not."""


@dataclass(frozen=True, slots=True)
class ModelReply:
    """What the propose stage returns: the proposal, its cost, the proposing key's
    settings it was made under, or why the run must halt; the edits it made (the notes
    the model was shown, the budget it spent) and, when a rule gate looked at the last
    failed read and left the step to the model, why."""

    proposal: Proposal
    usage: RunUsageSummary
    settings: ActuatorSettings
    halt: HaltReason | None = None
    strict: bool = False
    level: str = "loose"
    reasks: int = 0
    disagreement: float = 0.0  # the share of voted samples outside the majority
    confidence: Confidence | None = None  # the sensors' reading before the call ran
    ruled_by: str | None = None  # the rule that proposed this call past the gate, if any
    timeout_factor: float = 1.0  # a rule's widening of the acting tool's timeout
    retry_cap: int | None = None  # a rule's call keeps to the attempts the read had left
    sampling: Mapping[str, Any] | None = None  # the cascade's reading, rung by rung
    edits: tuple[Edit, ...] = ()
    gate_note: str | None = None
    gated: bool = False  # the rule gate took the last step's advice

    @property
    def u(self) -> float:
        return self.settings.u


@dataclass(frozen=True, slots=True)
class Judged:
    """What a plan mode made of a step's outcome: notes for the record, a halt, the plan's
    edits (and any note for the model), and the phase the step leaves the task in."""

    notes: tuple[str, ...] = ()
    halt: HaltReason | None = None
    edits: tuple[Edit, ...] = ()
    phase: str | None = None


Judge = Callable[[ActionCall | None, Observation | None, Mapping[str, Any]], Awaitable[Judged]]
"""A plan mode's judge: (the action, its observation or None, the state as the step
leaves it, in the read-only view a precondition gets) -> what it means for the plan
(advance, send back, replan)."""


@dataclass(frozen=True, slots=True)
class RuleAdvice:
    """A rule's decision on a step's failed answer, for the next step's gate: the call,
    the step it failed in and how many attempts it had used (``_gate.py``)."""

    decision: Decision
    call: ActionCall
    step: int = 0
    attempts: int = 1


@dataclass(frozen=True, slots=True)
class Carry:
    """What one step hands the next (and a run's start its first step)."""

    actuators: Actuators = field(default_factory=Actuators)
    advice: RuleAdvice | None = None  # the rule for the last step's failed read
    confirmation: Confirmation | None = None  # a human's approval, until its action runs
    note: str | None = None  # said once, first in the next step's record


@dataclass(frozen=True, slots=True, kw_only=True)
class Ask:
    """What a mode asks of this step: the phase, the proposing key, the kinds of reply and
    their schema, hints for the model; or a proposal made in code (``made``: the model is
    not asked), or a step settled in code (``settled``: nothing is proposed or run); the
    edits the mode made before anything ran, and its judge."""

    phase: str
    key: str
    kinds: frozenset[str] = frozenset()
    schema: Schema | None = None
    hints: tuple[str, ...] = ()
    made: Proposal | None = None
    settled: str | None = None
    edits: tuple[Edit, ...] = ()
    judge: Judge | None = None


class Mode(Protocol):
    """An arrangement of the stages (``_modes.py``): what each step asks for."""

    @property
    def name(self) -> str: ...

    def ask(self, run: Run) -> Ask: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class View:
    """The step as it starts: its index and phase, what it asks, what it was handed, the
    proposing key's settings and the tools its proposal is shown."""

    step: int
    phase: str
    ask: Ask
    carry: Carry
    settings: ActuatorSettings
    shown: tuple[Tool, ...]

    @property
    def key(self) -> str:
        return self.ask.key

    @property
    def edits(self) -> tuple[Edit, ...]:
        """What the step changed before its proposal: its phase, the mode's edits."""
        return (Phase(self.phase), *self.ask.edits)

    def condition_view(
        self,
        run: Run,
        fields: Mapping[str, Any] | None = None,
        entries: Sequence[ObservationEntry] | None = None,
    ) -> dict[str, Any]:
        """The read-only view a tool's preconditions receive as ``state``: the state as
        the step starts, or with the step's ``fields`` and kept observation ``entries``."""
        state = run.state
        latest: dict[str, dict[str, Any]] = {}
        for entry in state.observations if entries is None else entries:
            latest[entry.tool] = entry.observation
        return {
            "task_id": state.task_id,
            "phase": self.phase,
            "step": state.step,
            "fields": dict(state.required_fields if fields is None else fields),
            "latest": latest,
        }


def visible_tools(run: Run) -> list[Tool]:
    """The tools the model may be shown: under dimension reduction, the core ones only."""
    tools = list(run.settings.tools.values())
    if run.control.protocol is DefenceProtocol.DIMENSION_REDUCTION:
        return [t for t in tools if t.core]
    return tools


async def project(run: Run, mode: Mode, carry: Carry) -> View:
    """The first stage: what the mode asks, under the proposing key's settings, with the
    tools they show (the most relevant share of the visible ones, those the run has called
    first; one choice per step, so the prompt and the grammar agree)."""
    ask = mode.ask(run)
    settings = await run.controllers.settings(carry.actuators, ask.key)
    shown = visible_tools(run)
    if settings.context < 1.0:
        state = run.state
        shown = relevant_tools(
            shown, settings.context, state.prompt, [e.tool for e in state.observations]
        )
    return View(
        step=run.state.step,
        phase=ask.phase,
        ask=ask,
        carry=carry,
        settings=settings,
        shown=tuple(shown),
    )
