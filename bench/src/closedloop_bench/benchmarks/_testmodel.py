"""``test:oracle``: a competent, deterministic model with no control of its own.

It plans perfectly (it proposes a task's ideal trajectory, one call per new prompt) and
answers honestly from what it observed: the ideal answer when every ideal call's last
answer equals the answer a fault-free world gives, otherwise "impossible: I could not
read ..." (it never invents a value). It never retries, never validates and never
notices a fault by itself, so every difference between strategies that use it is a
difference in their control, not in the model. Identical prompts get identical replies
(dual verification asks twice), and it answers in the JSON action format every strategy
here reads: ``{"tool": ..., "arguments": {...}}`` or ``{"final": ..., "fields": {...}}``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from closedloop._exceptions import ConfigurationError
from closedloop.models import CallInfo, FunctionModel, Message
from closedloop.perception import Observation

from ..reference import ANSWER_FIELD, ReferenceTask, WorldTools, play_ideal, resolve_arguments
from ..world import World, create_world_app, load_world

__all__ = ["ExpectedCall", "IdealReference", "oracle_model"]


@dataclass(frozen=True, slots=True)
class ExpectedCall:
    """What one ideal call answers in a fault-free world: its status and value digest."""

    tool: str
    status: str
    digest: str

    def matches(self, observation: Observation) -> bool:
        return observation.status.value == self.status and digest(observation) == self.digest


def digest(observation: Observation) -> str:
    """A digest of an observation's value (what a model reading it would learn)."""
    text = json.dumps(observation.value, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:20]


class IdealReference:
    """Plays each task's ideal trajectory once on a fault-free world (in process) and keeps
    what every call answered; the oracle model compares its observations with these."""

    def __init__(self) -> None:
        self._expected: dict[str, tuple[ExpectedCall, ...]] = {}
        self._worlds: dict[int, tuple[World, httpx.ASGITransport]] = {}
        self._lock = asyncio.Lock()

    async def expected(self, task: ReferenceTask) -> tuple[ExpectedCall, ...]:
        """The fault-free answers of ``task``'s ideal calls, in order (computed once)."""
        found = self._expected.get(task.id)
        if found is not None:
            return found
        async with self._lock:  # one fault-free world per data seed, reset for every task
            found = self._expected.get(task.id)
            if found is None:
                found = await self._play(task)
                self._expected[task.id] = found
        return found

    async def _play(self, task: ReferenceTask) -> tuple[ExpectedCall, ...]:
        made = self._worlds.get(task.world_seed)
        if made is None:
            world = World(data=load_world(task.world_seed), profile="none", latency_scale=0.0)
            made = (world, httpx.ASGITransport(app=create_world_app(world)))
            self._worlds[task.world_seed] = made
        world, transport = made
        world.reset()
        # A fixed timeout: the adaptive one falls to 50 ms on an in-process world, and a
        # busy machine must not turn the reference answers into timeouts.
        async with WorldTools("http://world.invalid", transport=transport, timeout_s=60.0) as tools:
            _, observations = await play_ideal(task, tools)
        return tuple(
            ExpectedCall(call.tool, obs.status.value, digest(obs))
            for call, obs in zip(task.ideal_trajectory, observations, strict=True)
        )


class _OracleState:
    """One episode's progress: the replies given per prompt and where the journal stood."""

    def __init__(self, task: ReferenceTask, tools: WorldTools, expected: tuple[ExpectedCall, ...]):
        self.task = task
        self.tools = tools
        self.expected = expected
        self.replies: dict[str, dict[str, Any]] = {}
        self.marks: list[int] = []  # journal position when each ideal call was proposed

    def reply(self, messages: Sequence[Message]) -> dict[str, Any]:
        key = hashlib.sha256(
            json.dumps([m.to_dict() for m in messages], ensure_ascii=False).encode("utf-8")
        ).hexdigest()
        known = self.replies.get(key)
        if known is not None:
            return known
        index = len(self.marks)
        script = self.task.ideal_trajectory
        if index < len(script):
            self.marks.append(len(self.tools.journal))
            call = script[index]
            try:
                arguments = resolve_arguments(call.arguments, self.tools)
            except Exception:  # the id it needs never came back: it asks with the reference
                arguments = dict(call.arguments)
            answer: dict[str, Any] = {"tool": call.tool, "arguments": arguments}
        else:
            answer = self._final()
        self.replies[key] = answer
        return answer

    def _final(self) -> dict[str, Any]:
        journal = self.tools.journal
        bounds = [*self.marks, len(journal)]
        for k, expected in enumerate(self.expected):
            window = journal[bounds[k] : bounds[k + 1]] if k + 1 < len(bounds) else ()
            seen = [r.observation for r in window if r.tool == expected.tool]
            if not seen or not expected.matches(seen[-1]):
                status = seen[-1].status.value if seen else "no answer"
                why = f"could not read {expected.tool} (its answer was {status})"
                text = f"I cannot complete this task: {why}."
                return {
                    "final": text,
                    "fields": {ANSWER_FIELD: {"status": "impossible", "reason": why}},
                }
        ideal = self.task.ideal_answer
        return {"final": ideal.text, "fields": {ANSWER_FIELD: dict(ideal.fields)}}


def oracle_model(
    task: ReferenceTask,
    tools: WorldTools,
    expected: tuple[ExpectedCall, ...],
    *,
    name: str = "test:oracle",
) -> FunctionModel:
    """The ``test:oracle`` model for one episode of ``task`` on ``tools`` (see the module)."""
    if len(expected) != len(task.ideal_trajectory):
        raise ConfigurationError("expected", len(expected), "must hold one entry per ideal call")
    state = _OracleState(task, tools, expected)

    def answer(messages: tuple[Message, ...], _call: CallInfo) -> Mapping[str, Any]:
        return state.reply(messages)

    return FunctionModel(answer, name=name)
