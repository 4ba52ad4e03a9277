"""The event bus in the loop: a failed attempt published as a fault event, healed.

With ``Runtime(events=bus)`` the tool port publishes, after each attempt of a tool call
whose answer is a fault the loop already classifies, the matching event of
:mod:`closedloop.feedback` (a 5xx: ``ServerError``; a timeout: ``TimeoutEvent``; a 429:
``RateLimited`` with its ``Retry-After``; an answer that lost key fields: ``SchemaDrift``),
with the tool's name as ``source`` and the run's session as ``session_id``. Every
:class:`~closedloop.feedback.HealingAction` the bus's handlers answer with is applied here
and written into the step's record (the ``acted`` entry of its actuators):

* ``open_circuit``: the tool's breaker in the agent's tool health is opened (Nygard 2007);
  without ``ControlConfig(health=...)`` there is no breaker to open, and the record says
  the action was ignored.
* ``widen_timeout``: the action's ``timeout_s`` becomes a floor under the tool's timeout
  for the rest of the run (its next attempt included); a tool whose own action fixes its
  timeout keeps it, and the record says so.
* ``escalate``: the run hands its task over to a human, on the loop's own handover path.
* ``use_cache``: the loop keeps no cache of good answers to serve (within a run the same
  call is not made again after a good answer: the repeat guard refuses it), so the
  action is recorded and ignored.

No bus, no events: the loop acts on its own estimates only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..feedback import (
    EventBus,
    FaultEvent,
    HealingAction,
    HealingKind,
    RateLimited,
    SchemaDrift,
    ServerError,
    TimeoutEvent,
)
from ..perception import Observation, ObservationStatus
from ._health import ToolHealth
from ._reads import http_status

__all__ = ["BusHealing", "Healed", "fault_event"]


def fault_event(
    observation: Observation,
    *,
    source: str,
    session_id: str | None,
    timeout_s: float | None,
    latency_s: float | None,
) -> FaultEvent | None:
    """The fault event one attempt's answer is, or None: it is not a fault the loop
    classifies (an ok answer, a 4xx, an empty one)."""
    detail = observation.error or observation.meaning
    status = observation.status
    if status is ObservationStatus.TIMEOUT:
        timeout = timeout_s if timeout_s is not None and timeout_s > 0 else None
        return TimeoutEvent(
            source=source,
            session_id=session_id,
            detail=detail,
            timeout_s=timeout,
            latency_s=latency_s,
        )
    if status is ObservationStatus.RATE_LIMITED:
        after = observation.retry_after_s
        return RateLimited(
            source=source,
            session_id=session_id,
            detail=detail,
            retry_after_s=None if after is None or after < 0 else after,
            at=observation.timestamp,
        )
    if status is ObservationStatus.PARTIAL:
        return SchemaDrift(source=source, session_id=session_id, detail=detail)
    if status is ObservationStatus.ERROR:
        code = http_status(observation)
        if code is not None and code >= 500:
            return ServerError(
                source=source, session_id=session_id, detail=detail, status_code=code
            )
    return None


@dataclass(frozen=True, slots=True)
class Healed:
    """What the answers to one fault event did, for the step's record, and why the call
    must hand the run over (None: it goes on)."""

    acted: tuple[str, ...] = ()
    escalation: str | None = None


@dataclass(slots=True)
class BusHealing:
    """One run's use of an event bus: publish a tool's faults, apply the answers.

    ``floors`` are the timeouts widened so far, by tool.
    """

    bus: EventBus
    health: ToolHealth | None
    floors: dict[str, float] = field(default_factory=dict)

    def timeout_s(self, tool: str, timeout_s: float) -> float:
        """The tool's timeout with the floor a widening action set for it."""
        return max(timeout_s, self.floors.get(tool, 0.0))

    async def heal(self, event: FaultEvent, *, fixed_timeout: bool) -> Healed:
        """Publish ``event``, apply every healing action its handlers answer with."""
        delivery = await self.bus.publish(event)
        acted: list[str] = []
        escalation: str | None = None
        for action in delivery.results_of(HealingAction):
            acted.append(self._apply(event.source, action, fixed_timeout=fixed_timeout))
            if action.kind is HealingKind.ESCALATE and escalation is None:
                # EscalateToHuman's reason opens with what the handover note says already.
                escalation = action.reason.removeprefix("handed over to a human: ")
        return Healed(tuple(acted), escalation)

    def _apply(self, tool: str, action: HealingAction, *, fixed_timeout: bool) -> str:
        ignored: str | None = None
        kind = action.kind
        if kind is HealingKind.OPEN_CIRCUIT:
            if self.health is None:
                ignored = "the agent keeps no tool health (ControlConfig(health=...))"
            else:
                self.health.trip(tool, "the event bus opened its breaker")
        elif kind is HealingKind.WIDEN_TIMEOUT:
            widened = action.params.get("timeout_s")
            if fixed_timeout:
                ignored = "the tool's own action fixes its timeout"
            elif not isinstance(widened, int | float) or isinstance(widened, bool):
                ignored = f"no timeout_s in the action ({widened!r})"
            else:
                self.floors[tool] = max(float(widened), self.floors.get(tool, 0.0))
        elif kind is HealingKind.ESCALATE:
            pass  # the call hands the run over (``Healed.escalation``)
        else:  # HealingKind.USE_CACHE
            ignored = "the loop keeps no cache of good answers to serve"
        entry = f"event bus: {kind.value} on {tool} ({action.reason})"
        return entry if ignored is None else f"{entry}; ignored: {ignored}"
