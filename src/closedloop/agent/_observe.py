"""The observe stage: an observation goes into the task state.

The entry the model reads next step (compacted), the required fields a tool's answer
fills, and whether the step brought anything new (progress, for the no-progress stop).
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

from ..perception import Observation, ObservationStatus
from ._records import ActionCall
from ._state import ObservationEntry, resolve_path
from ._tools import Tool

if TYPE_CHECKING:
    from ._run import Run

__all__ = ["absorb"]


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=repr)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _dump(observation: Observation, max_chars: int) -> dict[str, Any]:
    small = observation.compacted(max_chars).model_copy(update={"raw": None})
    try:
        return small.model_dump(mode="json")
    except (TypeError, ValueError):  # a value pydantic cannot serialise: keep its text
        return small.model_copy(update={"value": repr(small.value)}).model_dump(mode="json")


def absorb(
    run: Run, tool: Tool, call: ActionCall, observation: Observation
) -> tuple[dict[str, Any], bool]:
    """Put an observation into the state: the entry, filled fields, progress."""
    state = run.state
    dumped = _dump(observation, run.settings.observation_chars)
    progress = False
    if observation.status in (
        ObservationStatus.OK,
        ObservationStatus.PARTIAL,
        ObservationStatus.STALE,
    ):
        digest = _digest([tool.name, observation.value])
        if digest not in state.seen_values:
            state.seen_values.append(digest)
            del state.seen_values[:-64]
            progress = True
    if observation.status is ObservationStatus.OK and tool.fills:
        before = run.complete_count()
        sources = {f.name: f.source for f in run.task.required_fields}
        for name, path in tool.fills.items():
            if sources.get(name) not in (None, tool.name):
                continue  # the field is reserved for another tool's answers
            found, value = resolve_path(observation.value, path)
            if found and value is not None:
                state.required_fields[name] = value
        run.refresh_fields()
        progress = progress or run.complete_count() > before
    state.observations.append(
        ObservationEntry(
            step=state.step,
            tool=tool.name,
            # as the tool port handed them on: a secret the model wrote out is a reference
            arguments=dict(run.secrets.adopt(call.arguments)),
            observation=dumped,
            progress=progress,
        )
    )
    overflow = len(state.observations) - run.settings.keep_observations
    if overflow > 0:
        del state.observations[:overflow]
        state.dropped_observations += overflow
    if not observation.usable or observation.status is ObservationStatus.EMPTY:
        state.failures.append(
            f"step {state.step}: {tool.name} -> {observation.status}: {observation.meaning}"
        )
    return dumped, progress
