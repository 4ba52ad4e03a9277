"""The control signal → actuator settings, and the key scheme of the step's controllers.

One PID per key (:class:`~closedloop.agent._control.ControllerBank`), one key per thing
the loop can do well or badly. The scheme, in one place:

=====================  ==========================================================
key                    what its error measures, and what its output drives
=====================  ==========================================================
``propose:<role>``     whether the model's proposal was accepted (0) or refused (1);
                       drives the model's settings (strict decoding, rigour prompt).
                       Roles: ``react``, ``executor`` (planner / executor / reviewer),
                       ``finishing`` (the plan modes' final answer).
``plan``               the planner's proposal in the plan modes, and the planned
                       calls that plan-and-execute runs without asking the model.
``<tool name>``        the tool's answer under its error metric; drives the tool's
                       timeout, retry delay and attempts.
``final``              a final answer: accepted (0) or refused (1).
=====================  ==========================================================

Beside the PIDs, the bank keeps one record per model, ``loose:<model name>``: the errors
of that model's recent loose proposals. A model that history measured unable to answer
loosely (:meth:`Controllers.strictness_floor`) starts a run on the grammar, whatever the
key's u says, so the step that matters most is not the unconstrained one.

A step feeds at most two of them: its proposing key with the proposal's error, then its
acting key (the tool, ``final``) with the action's; a proposal refused before anything
ran feeds its proposing key alone. Every update hands back the settings
the next step acts on, as one value (:class:`Actuators`), so the control signal travels
forward from the update to the action instead of being asked for again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from ..control import ActuatorSettings, Strictness
from ..feedback._json import checked_document
from ._control import ControllerBank

__all__ = [
    "FINAL",
    "PLAN",
    "Actuators",
    "ControlUpdate",
    "Controllers",
    "act_key",
    "loose_key",
    "propose_key",
]

PLAN = "plan"
"""The planner's key (and plan-and-execute's planned calls)."""
FINAL = "final"
"""The key of a final answer."""


def propose_key(role: str) -> str:
    """The key of the model proposing as ``role`` (``react``, ``executor``, ``finishing``)."""
    return f"propose:{role}"


def loose_key(model: str) -> str:
    """The record of ``model``'s loose proposals (their errors, newest last)."""
    return f"loose:{model}"


def act_key(tool: str) -> str:
    """The key of running ``tool``: its name."""
    return tool


@dataclass(frozen=True, slots=True)
class Actuators:
    """What one step hands to the next: the actuator settings per key, the errors the
    controllers measured per key, and the step's own error and quality.

    Holds the keys this run has fed; a key it has not fed yet starts from the bank's
    warm start (the history of earlier runs), read once by :meth:`Controllers.settings`.
    The errors travel with the settings they produced: every reader of an earlier step's
    error (the empty-answer doubt, the rule gate, the handover audit, the stop policies)
    reads it here, never from the run.
    """

    by_key: Mapping[str, ActuatorSettings] = field(default_factory=dict)
    errors: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    last: tuple[float, float] | None = None  # the step's (e, quality), held by a step
    # that measures nothing

    def get(self, key: str) -> ActuatorSettings | None:
        return self.by_key.get(key)

    def error(self, key: str) -> float | None:
        """The newest error measured on ``key`` in this run."""
        errors = self.errors.get(key)
        return errors[-1] if errors else None

    def latest_errors(self) -> dict[str, float]:
        """The newest error of every key measured in this run."""
        return {key: errors[-1] for key, errors in self.errors.items() if errors}

    # Built directly, not with ``replace``: called every step, and ``replace`` walks the
    # fields to copy the two that stay.
    def updated(self, key: str, settings: ActuatorSettings) -> Actuators:
        return Actuators(MappingProxyType({**self.by_key, key: settings}), self.errors, self.last)

    def measured(self, key: str, error: float, quality: float, keep: int) -> Actuators:
        """``key`` measured ``error`` (its newest ``keep`` errors are kept) in a step of
        ``quality``."""
        history = (*self.errors.get(key, ()), error)[-max(1, keep) :]
        errors = MappingProxyType({**self.errors, key: history})
        return Actuators(self.by_key, errors, (error, quality))


@dataclass(frozen=True, slots=True)
class ControlUpdate:
    """One key's controller after a step: its output ``u``, the PID's (P, I, D) terms, and
    the settings every key acts on next step."""

    key: str
    u: float
    components: tuple[float, float, float]
    actuators: Actuators


class Controllers:
    """The bank of PIDs seen through the key scheme, with the schedule u → settings."""

    def __init__(self, bank: ControllerBank) -> None:
        self.bank = bank
        self.schedule = bank.config.schedule

    async def settings(self, actuators: Actuators, key: str) -> ActuatorSettings:
        """What ``key`` acts on now: the value handed forward, else the warm start."""
        carried = actuators.get(key)
        if carried is not None:
            return carried
        return self.schedule(await self.bank.output(key))

    async def update(self, actuators: Actuators, key: str, error: float) -> ControlUpdate:
        """Feed ``key`` one error in [0, 1]; the returned actuators carry its new setting."""
        u, components, next_u = await self.bank.feed(key, error)
        settings = self.schedule(next_u)
        # A held schedule reports its held u: the trace must not show a live signal the
        # actuators never followed.
        u = self.schedule.reported(u)
        return ControlUpdate(key, u, components, actuators.updated(key, settings))

    async def held(self, actuators: Actuators, key: str) -> ControlUpdate:
        """A step that measured nothing: ``key`` keeps its output and its terms."""
        pid = await self.bank.ensure(key)
        u = (await self.settings(actuators, key)).u
        return ControlUpdate(key, u, pid.components, actuators)

    async def strictness_floor(self, model: str) -> Strictness | None:
        """The least rung a run's first proposal starts on: the configured prior, raised to
        the grammar when ``model``'s recent loose proposals were mostly refused."""
        config = self.bank.config
        floor = config.strictness_prior
        record = await self.bank.store.record_get(config.namespace, loose_key(model))
        errors = _errors(record.value.get("errors") if record is not None else None)
        errors = errors[-config.loose_window :]
        if len(errors) >= 2 and sum(errors) / len(errors) >= config.loose_failure_rate:
            floor = Strictness.STRICT
        return floor

    async def note_loose(self, model: str, error: float) -> None:
        """Keep the error of one of ``model``'s loose proposals (0 accepted, 1 refused)."""
        config = self.bank.config
        store, key = self.bank.store, loose_key(model)
        record = await store.record_get(config.namespace, key)
        errors = _errors(record.value.get("errors") if record is not None else None)
        errors = [*errors, min(1.0, max(0.0, float(error)))][-config.loose_window :]
        # A fresh dict: checked and encoded once, not copied again by the store.
        await store.record_put(config.namespace, key, checked_document({"errors": errors}, "value"))


def _errors(raw: object) -> list[float]:
    if not isinstance(raw, list | tuple):
        return []
    return [float(e) for e in raw if isinstance(e, int | float) and not isinstance(e, bool)]
