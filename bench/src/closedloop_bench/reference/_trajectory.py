"""Playing a task's ideal trajectory: directly on the tools, or as a scripted model in the loop.

The ideal trajectory is what an oracle agent does (the benchmark's oracle bound counts
its calls); playing it against a real world and judging the result with the task's own
checker tests the task, its truth and the tools together.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from closedloop._exceptions import ConfigurationError, ToolError
from closedloop.execution import AtomicAction
from closedloop.models import CallInfo, FunctionModel, Message
from closedloop.perception import Observation

from ._plumbing import WorldClient
from ._tasks import ANSWER_FIELD, Answer, ReferenceTask

__all__ = ["ideal_model", "play_ideal", "resolve_arguments"]

_REF = re.compile(r"^\$([A-Za-z_]\w*)\.([\w.]+)$")


def resolve_arguments(arguments: Mapping[str, Any], tools: WorldClient) -> dict[str, Any]:
    """Replace ``"$tool.path"`` arguments with that path in the tool's latest answer."""
    out: dict[str, Any] = {}
    for name, value in arguments.items():
        match = _REF.match(value) if isinstance(value, str) else None
        if match is None:
            out[name] = value
            continue
        record = tools.last(match.group(1))
        if record is None:
            raise ToolError(f"{name}={value!r}: {match.group(1)} has not been called yet")
        current: Any = record.observation.value
        for part in match.group(2).split("."):
            if not isinstance(current, Mapping) or part not in current:
                raise ToolError(f"{name}={value!r}: the answer of {match.group(1)} has no {part!r}")
            current = current[part]
        out[name] = current
    return out


async def play_ideal(task: ReferenceTask, tools: Any) -> tuple[Answer, list[Observation]]:
    """Call the ideal trajectory's tools in order (no model, no loop); return the ideal
    answer and the observations. Effects run without a ledger and raise when refused."""
    observations = []
    for call in task.ideal_trajectory:
        args = resolve_arguments(call.arguments, tools)
        tool = tools.tool(call.tool)
        fn = tool.fn if isinstance(tool, AtomicAction) else tool
        result = await fn(**args)
        if not isinstance(result, Observation):  # pragma: no cover - every tool returns one
            raise ConfigurationError(call.tool, result, "a world tool must return an Observation")
        observations.append(result)
    return task.ideal_answer, observations


def ideal_model(task: ReferenceTask, tools: WorldClient, *, name: str = "ideal") -> FunctionModel:
    """A ``FunctionModel`` that proposes the ideal trajectory, one call per step, then the
    ideal final answer (``{"final": ..., "fields": {"answer": ...}}``). Run-time ids
    (``"$book_flight.order_id"``) are read from ``tools.journal``."""
    script = list(task.ideal_trajectory)
    position = {"next": 0}

    def propose(_messages: Sequence[Message], _call: CallInfo) -> dict[str, Any]:
        index = position["next"]
        position["next"] += 1
        if index < len(script):
            step = script[index]
            return {"tool": step.tool, "arguments": resolve_arguments(step.arguments, tools)}
        return {
            "final": task.ideal_answer.text,
            "fields": {ANSWER_FIELD: dict(task.ideal_answer.fields)},
        }

    return FunctionModel(propose, name=name)
