"""The observe stage: what an observation changes in the state.

An executor's outcome has become an observation in the tool port (``_outcome.py``); here
it becomes the entry the model reads next step (compacted), the required fields a tool's answer fills, and whether the step brought
anything new (progress, for the no-progress stop), returned as the edits the fold applies.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..perception import Observation, ObservationStatus
from ._fold import Edit, Filled, Noted, Observed, field_errors
from ._records import ActionCall
from ._state import ObservationEntry, field_problems, resolve_path
from ._tools import Tool

if TYPE_CHECKING:
    from ._run import Run

__all__ = ["Absorbed", "absorb", "complete_count"]


@dataclass(frozen=True, slots=True)
class Absorbed:
    """An observation taken in: as the state keeps it (and its entry), whether it was new,
    the required fields after it, the entries kept before it, and the edits that keep it."""

    dumped: dict[str, Any]
    entry: ObservationEntry
    progress: bool
    fields: Mapping[str, Any]
    earlier: list[ObservationEntry]
    edits: tuple[Edit, ...]


_SORTED = json.JSONEncoder(sort_keys=True, ensure_ascii=False, default=repr)
"""Built once: ``json.dumps`` with options builds a new encoder for every call."""


def _digest(value: Any) -> str:
    text = _SORTED.encode(value)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _dump(observation: Observation, max_chars: int) -> dict[str, Any]:
    small = observation.compacted(max_chars).model_copy(update={"raw": None})
    try:
        return small.model_dump(mode="json")
    except (TypeError, ValueError):  # a value pydantic cannot serialise: keep its text
        return small.model_copy(update={"value": repr(small.value)}).model_dump(mode="json")


def complete_count(run: Run, fields: Mapping[str, Any]) -> int:
    """How many of the task's required fields ``fields`` fill validly."""
    required = run.task.required_fields
    return len(required) - len(field_problems(required, fields))


def _fill(run: Run, tool: Tool, observation: Observation) -> dict[str, Any]:
    fields = dict(run.state.required_fields)
    sources = {f.name: f.source for f in run.task.required_fields}
    for name, path in tool.fills.items():
        if sources.get(name) not in (None, tool.name):
            continue  # the field is reserved for another tool's answers
        found, value = resolve_path(observation.value, path)
        if found and value is not None:
            fields[name] = value
    return fields


def absorb(run: Run, tool: Tool, call: ActionCall, observation: Observation) -> Absorbed:
    """An observation into the state: the entry, filled fields, progress."""
    state, cfg = run.state, run.settings
    dumped = _dump(observation, cfg.observation_chars)
    edits: list[Edit] = []
    progress, digest = False, None
    if observation.status in (
        ObservationStatus.OK,
        ObservationStatus.PARTIAL,
        ObservationStatus.STALE,
    ):
        digest = _digest([tool.name, observation.value])
        progress = digest not in state.seen_values
        digest = digest if progress else None
    fields: Mapping[str, Any] = state.required_fields
    if observation.status is ObservationStatus.OK and tool.fills:
        before = complete_count(run, fields)
        fields = _fill(run, tool, observation)
        edits.append(Filled(fields, field_errors(run.task.required_fields, fields)))
        progress = progress or complete_count(run, fields) > before
    entry = ObservationEntry(
        step=state.step,
        tool=tool.name,
        # as the tool port handed them on: a secret the model wrote out is a reference
        arguments=dict(run.secrets.adopt(call.arguments)),
        observation=dumped,
        progress=progress,
    )
    edits.insert(0, Observed(entry, digest, cfg.keep_observations))
    if not observation.usable or observation.status is ObservationStatus.EMPTY:
        failure = f"step {state.step}: {tool.name} -> {observation.status}: {observation.meaning}"
        edits.append(Noted(failures=(failure,)))
    earlier = [*state.observations, entry][-cfg.keep_observations :][:-1]
    return Absorbed(dumped, entry, progress, fields, earlier, tuple(edits))
