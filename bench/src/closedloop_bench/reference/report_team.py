"""The multi-step report task as a team of sub-agents (distributed control).

Three roles: **gathering** (find the documents: ``search_documents``), **extraction and
comparison** (read each document: ``get_document``) and **writing** (answer from what was
read). Each sub-agent runs its own loop with its own PID: after every call, the call's
error (confidence deficit; 1 for a transient failure or a drifted answer) drives its u,
and u sets its retry delay; every call has the benchmark's shared attempt budget (one
more under dual verification, for the second agreeing reading).

With a :class:`~closedloop.agent.Coordinator`, every call's (u, quality) also goes to the
coordinator's ESO for that sub-agent, which decides: ``dual_verification`` (a reading
counts only when two reads in a row agree), ``reduced_scope`` (gathering is skipped when
the plan already names the documents) or ``handover`` (the role is re-planned onto the
healthiest sub-agent, which runs it with a fresh budget; with nobody left, a person).

The writer answers as the deterministic test model does: the plan's answer when every
essential reading matches what a fault-free world gives (``expected``), else "impossible:
I could not read ...". Modes: ``single`` (one loop, one PID for every call), ``team``
(three loops, no coordinator), ``coordinated`` (three loops and the coordinator).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from closedloop._exceptions import ConfigurationError, ToolError
from closedloop._validation import require_int_at_least
from closedloop.agent import Coordinator, CoordinatorDecision, SubAgentReport
from closedloop.control import PID, schedule_retry_delay_ms
from closedloop.perception import Observation, ObservationStatus

from ._tasks import Answer, ReferenceTask, TrajectoryCall
from ._tools import WorldTools
from ._trajectory import resolve_arguments

__all__ = ["MODES", "TeamOutcome", "run_report_team"]

MODES = ("single", "team", "coordinated")
ROLES = ("gathering", "extraction", "writing")
OWNERS = {"gathering": "gatherer", "extraction": "extractor", "writing": "writer"}
ESSENTIAL = frozenset({"get_document"})
Sleep = Callable[[float], Awaitable[None]]


class Expected(Protocol):
    """What a fault-free world answers one call (``bench.ExpectedCall`` fits)."""

    @property
    def tool(self) -> str: ...

    def matches(self, observation: Observation) -> bool: ...


@dataclass(slots=True)
class TeamOutcome:
    """How the team ended: the answer, decisions taken, re-plans and calls made."""

    answer: Answer
    calls: int = 0
    decisions: dict[str, str] = field(default_factory=dict)
    replans: list[str] = field(default_factory=list)
    peak: str = "normal"


def _error(observation: Observation) -> float:
    if observation.status in (ObservationStatus.OK, ObservationStatus.EMPTY):
        return 1.0 - observation.confidence if observation.status is ObservationStatus.OK else 0.5
    return 1.0


def _same(a: Observation, b: Observation) -> bool:
    def key(o: Observation) -> str:
        return json.dumps([o.status.value, o.value], sort_keys=True, default=str)

    return key(a) == key(b)


class _SubAgent:
    """One loop: a PID on its calls' errors; u schedules its delay and attempt budget."""

    def __init__(self, name: str, attempts: int, sleep: Sleep) -> None:
        self.name = name
        self.attempts = attempts
        self.sleep = sleep
        self.delay = schedule_retry_delay_ms()
        self.pid = PID(0.8, 0.05, 0.3, setpoint=1.0, output_limits=(0.0, 1.0), time_fn=lambda: 0.0)
        self.u = 0.0

    def budget(self, decision: CoordinatorDecision) -> int:
        # The shared retry budget; a second agreeing reading may cost one call more.
        return self.attempts + (1 if decision is CoordinatorDecision.DUAL_VERIFICATION else 0)

    def feel(self, observation: Observation) -> float:
        e = _error(observation)
        self.u = self.pid(1.0 - e, dt=1.0)
        return e

    async def read(
        self,
        tools: WorldTools,
        call: TrajectoryCall,
        decision: Callable[[], CoordinatorDecision],
        report: Callable[[SubAgentReport], None],
    ) -> tuple[Observation | None, int]:
        """Call until a usable reading (two agreeing under dual verification)."""
        try:
            arguments = resolve_arguments(call.arguments, tools)
        except ToolError:
            arguments = dict(call.arguments)
        made, last = 0, None
        while made < self.budget(decision()):
            observation: Observation = await getattr(tools, call.tool)(**arguments)
            made += 1
            e = self.feel(observation)
            report(SubAgentReport(self.name, self.u, 1.0 - e))
            usable = observation.status in (ObservationStatus.OK, ObservationStatus.EMPTY)
            if usable and decision() is not CoordinatorDecision.DUAL_VERIFICATION:
                return observation, made
            if usable and last is not None and _same(last, observation):
                return observation, made
            last = observation if usable else last
            if made < self.budget(decision()):
                await self.sleep(self.delay(self.u) / 1000.0)
        return last, made


def _decider(coordinator: Coordinator | None, owner: str) -> Callable[[], CoordinatorDecision]:
    def decide() -> CoordinatorDecision:
        return CoordinatorDecision.NORMAL if coordinator is None else coordinator.decision(owner)

    return decide


async def run_report_team(
    task: ReferenceTask,
    tools: WorldTools,
    *,
    expected: Sequence[Expected],
    mode: str = "coordinated",
    attempts: int = 3,
    sleep: Sleep = asyncio.sleep,
) -> TeamOutcome:
    """Run ``task`` (a report task's plan) with the team in ``mode`` (see the module)."""
    if mode not in MODES:
        raise ConfigurationError("mode", mode, f"must be one of {', '.join(MODES)}")
    require_int_at_least("attempts", attempts, 1)
    plan = task.ideal_trajectory
    if len(expected) != len(plan):
        raise ConfigurationError("expected", len(expected), "needs one entry per planned call")
    names = ["agent"] if mode == "single" else list(OWNERS.values())
    agents = {n: _SubAgent(n, attempts, sleep) for n in names}
    coordinator = Coordinator(names) if mode == "coordinated" else None
    roles: dict[str, str] = {r: ("agent" if mode == "single" else OWNERS[r]) for r in ROLES}
    out = TeamOutcome(Answer())
    readings: dict[int, Observation | None] = {}
    order = ["gathering", "extraction"]
    stranded = False

    def report(r: SubAgentReport) -> None:
        if coordinator is not None:
            coordinator.observe(r)

    def calls_of(role: str) -> list[int]:
        essential = role == "extraction"
        return [i for i, c in enumerate(plan) if (c.tool in ESSENTIAL) == essential]

    for role in order:
        owner: str | None = roles[role]
        for attempt in range(2):  # the role's first owner, then one re-plan
            assert owner is not None
            decide = _decider(coordinator, owner)
            if role == "gathering" and decide() is CoordinatorDecision.REDUCED_SCOPE:
                break  # the plan names the documents: discovery is not essential
            agent = agents[owner] if attempt == 0 else _SubAgent(owner, attempts, sleep)
            failed = False
            for i in calls_of(role):
                observation, made = await agent.read(tools, plan[i], decide, report)
                out.calls += made
                readings[i] = observation
                failed = failed or observation is None
            if coordinator is None or not failed:
                break
            if coordinator.decision(owner) is not CoordinatorDecision.HANDOVER:
                break
            moved = coordinator.replan({role: owner})[role]
            if moved is None:
                out.replans.append(f"{role}: {owner} -> a person")
                stranded = stranded or role != "gathering"
                break
            out.replans.append(f"{role}: {owner} -> {moved}")
            coordinator.reset(owner)
            owner = moved
        if coordinator is not None and role == "gathering":
            lost = [i for i in calls_of(role) if readings.get(i, True) is None]
            if lost:  # discovery failed: the coordinator reduces the scope to the plan
                for i in lost:
                    del readings[i]
                out.replans.append("gathering: reduced scope (the plan names the documents)")
    if coordinator is not None:
        out.decisions = {n: d.value for n, d in coordinator.decisions().items()}
        levels = [d for _, _, d in coordinator.history]
        out.peak = max(levels, key=list(CoordinatorDecision).index).value if levels else "normal"
        if stranded:
            out.answer = Answer(handed_over=True, text="handed to a person")
            return out
    out.answer = _write(task, plan, expected, readings)
    return out


def _write(
    task: ReferenceTask,
    plan: Sequence[TrajectoryCall],
    expected: Sequence[Expected],
    readings: dict[int, Observation | None],
) -> Answer:
    """The writer: the plan's answer when every reading made (and every essential one)
    matches the fault-free world, else an honest "impossible"."""
    for i, (call, want) in enumerate(zip(plan, expected, strict=True)):
        if i not in readings and call.tool not in ESSENTIAL:
            continue  # skipped under reduced scope
        seen = readings.get(i)
        if seen is None or not want.matches(seen):
            status = "no answer" if seen is None else seen.status.value
            why = f"could not read {call.tool} (its answer was {status})"
            fields: dict[str, Any] = {"status": "impossible", "reason": why}
            return Answer(text=f"I cannot complete this task: {why}.", fields=fields)
    ideal = task.ideal_answer
    return Answer(text=ideal.text, fields=dict(ideal.fields))
