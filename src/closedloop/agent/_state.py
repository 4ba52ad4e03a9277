"""The task as structured state: what the loop knows, persisted in the store.

The context the model sees is a projection of this state, rebuilt every step; the state
itself is the record of truth: task id, phase, plan version, cursor, required fields,
effect ledger reference, budget and replan count, plus what the loop needs to resume a
frozen task exactly where it stopped. Completion is a code predicate: every required
field filled and validated.
"""

from __future__ import annotations

import contextlib
import re
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import jsonschema
import jsonschema.exceptions
import jsonschema.validators
from pydantic import BaseModel, ConfigDict, Field

from .._exceptions import ConfigurationError, StateSerializationError
from .._validation import require_unit_interval
from ..feedback import Snapshot, StateStore
from ..feedback._contract import Write
from ..feedback._json import CheckedDocument, checked_document
from ..feedback._store import BaseStore
from ._deferred import RidingWrites
from ._validate import schema_validator

__all__ = [
    "BudgetState",
    "ObservationEntry",
    "PendingAction",
    "PlanStep",
    "RequiredField",
    "StateHandle",
    "Task",
    "TaskState",
    "field_problems",
    "required_fields_of",
    "resolve_path",
]

FieldCheck = Callable[[Any], "bool | str"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RequiredField:
    """A field the task must fill before a final answer is accepted.

    ``schema`` (JSON schema) and ``check`` (``value -> True | False | reason``) validate the
    value; a missing, None or blank value is never complete. ``source`` names the tool
    whose answers alone may fill the field (through its ``fills``): a value the model
    writes into its final answer is then refused unless it equals the observed one, so a
    model cannot complete the task with a number it made up.
    """

    name: str
    description: str = ""
    schema: Mapping[str, Any] | None = None
    check: FieldCheck | None = None
    source: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not re.match(r"^[A-Za-z_][\w\-]*$", self.name):
            raise ConfigurationError("name", self.name, "must be an identifier-like string")
        if self.schema is not None:
            schema = dict(self.schema)
            try:
                jsonschema.validators.validator_for(schema).check_schema(schema)
            except jsonschema.exceptions.SchemaError as exc:
                raise ConfigurationError(
                    f"required_fields[{self.name!r}].schema", schema, exc.message
                ) from None
            object.__setattr__(self, "schema", schema)

    def problems(self, value: Any) -> list[str]:
        """Why ``value`` does not complete this field (empty when it does)."""
        if value is None or (isinstance(value, str) and not value.strip()):
            return ["missing"]
        if isinstance(value, list | dict) and not value:
            return ["empty"]
        out: list[str] = []
        if self.schema is not None:
            validator = schema_validator(self.schema, formats=False)
            out.extend(e.message for e in validator.iter_errors(value))
        if self.check is not None and not out:
            try:
                verdict = self.check(value)
            except Exception as exc:  # a failing check fails closed
                verdict = f"check raised {type(exc).__name__}: {exc}"
            if verdict is False:
                out.append("failed its check")
            elif isinstance(verdict, str):
                out.append(verdict)
        return out


def required_fields_of(value: RequiredFieldsInput | Iterable[Any]) -> tuple[RequiredField, ...]:
    if value is None:
        return ()
    if isinstance(value, Mapping):
        items: list[Any] = [
            v if isinstance(v, RequiredField) else RequiredField(name=k, schema=v)
            for k, v in value.items()
        ]
    elif isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise ConfigurationError("required_fields", value, "must be a list or a name -> schema map")
    else:
        items = [v if isinstance(v, RequiredField) else RequiredField(name=v) for v in value]
    names = [f.name for f in items]
    if len(set(names)) != len(names):
        raise ConfigurationError("required_fields", names, "names must be unique")
    return tuple(items)


RequiredFieldsInput = (
    Sequence["RequiredField | str"]
    | Mapping[str, "RequiredField | Mapping[str, Any] | None"]
    | None
)
"""Required fields as given: ``RequiredField``s, plain names, or a name → JSON schema map."""


@dataclass(frozen=True, slots=True, init=False)
class Task:
    """What to do: the prompt, the fields that define "done", and an optional fixed id.

    ``required_fields`` accepts ``RequiredField``s, names, or a name → JSON schema map.
    ``complexity`` (in [0, 1]) overrides the ESO setpoint for this task. ``context``
    pre-fills required fields the caller already knows.
    """

    prompt: str
    required_fields: tuple[RequiredField, ...]
    task_id: str | None
    complexity: float | None
    context: Mapping[str, Any]

    def __init__(
        self,
        prompt: str,
        *,
        required_fields: RequiredFieldsInput = (),
        task_id: str | None = None,
        complexity: float | None = None,
        context: Mapping[str, Any] | None = None,
    ) -> None:
        if not isinstance(prompt, str) or not prompt.strip():
            raise ConfigurationError("task", prompt, "the prompt must be non-empty text")
        if task_id is not None and (not isinstance(task_id, str) or not task_id or "/" in task_id):
            raise ConfigurationError("task_id", task_id, "must be non-empty, without '/'")
        if complexity is not None:
            complexity = require_unit_interval("complexity", complexity)
        object.__setattr__(self, "prompt", prompt)
        object.__setattr__(self, "required_fields", required_fields_of(required_fields))
        object.__setattr__(self, "task_id", task_id)
        object.__setattr__(self, "complexity", complexity)
        object.__setattr__(self, "context", dict(context or {}))


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:12]}"


# --- the persisted state -----------------------------------------------------------------


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ObservationEntry(_Model):
    """One step's observation as kept in the state (already compacted)."""

    step: int
    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    observation: dict[str, Any]
    progress: bool = False


class PlanStep(_Model):
    """One step of a structured plan."""

    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    goal: str = ""
    core: bool = True
    status: Literal["pending", "done", "skipped", "failed"] = "pending"
    sendbacks: int = 0


class BudgetState(_Model):
    """What the run has spent and what is left (None: no limit)."""

    tokens_used: int = 0
    cost_used: float = 0.0
    model_calls: int = 0
    tokens_left: int | None = None
    cost_left: float | None = None


class PendingAction(_Model):
    """The validated action a frozen task was about to take."""

    kind: Literal["tool", "final"]
    tool: str | None = None
    arguments: dict[str, Any] = Field(default_factory=dict)
    answer: str | None = None
    fields: dict[str, Any] = Field(default_factory=dict)
    step_type: str = ""


class TaskState(_Model):
    """The structured state of one task; the loop's working copy, stored as JSON."""

    task_id: str
    run_id: str
    session_id: str
    prompt: str
    mode: str
    phase: str
    status: Literal["running", "frozen", "done"] = "running"
    step: int = 0
    plan_version: int = 0
    cursor: int = 0
    plan: list[PlanStep] = Field(default_factory=list)
    required_fields: dict[str, Any] = Field(default_factory=dict)
    required_spec: list[dict[str, Any]] = Field(default_factory=list)
    field_errors: dict[str, list[str]] = Field(default_factory=dict)
    effect_ledger: dict[str, str] = Field(default_factory=dict)
    effect_keys: list[str] = Field(default_factory=list)
    budget: BudgetState = Field(default_factory=BudgetState)
    replan_count: int = 0
    observations: list[ObservationEntry] = Field(default_factory=list)
    dropped_observations: int = 0
    notes: list[str] = Field(default_factory=list)
    failures: list[str] = Field(default_factory=list)
    signatures: list[str] = Field(default_factory=list)
    seen_values: list[str] = Field(default_factory=list)
    no_progress_steps: int = 0
    repeat_count: int = 0
    elapsed_s: float = 0.0
    control: dict[str, Any] = Field(default_factory=dict)
    recoveries: int = 0
    pending: PendingAction | None = None
    handover_id: str | None = None
    answer: str | None = None
    halt: str | None = None

    def latest(self) -> dict[str, dict[str, Any]]:
        """The newest observation per tool (what preconditions and dependencies read)."""
        out: dict[str, dict[str, Any]] = {}
        for entry in self.observations:
            out[entry.tool] = entry.observation
        return out

    def condition_view(self) -> dict[str, Any]:
        """The read-only view preconditions receive as ``state``."""
        return {
            "task_id": self.task_id,
            "phase": self.phase,
            "step": self.step,
            "fields": dict(self.required_fields),
            "latest": self.latest(),
        }


def field_problems(
    spec: Iterable[RequiredField], values: Mapping[str, Any]
) -> dict[str, list[str]]:
    """Every required field that is not filled and valid, with the reasons."""
    out: dict[str, list[str]] = {}
    for required in spec:
        problems = required.problems(values.get(required.name))
        if problems:
            out[required.name] = problems
    return out


def resolve_path(value: Any, path: str) -> tuple[bool, Any]:
    """Follow a dotted path (``"rooms.0.id"``) into JSON data; ``""`` is the value itself."""
    if path == "":
        return True, value
    current = value
    for part in path.split("."):
        if isinstance(current, Mapping) and part in current:
            current = current[part]
        elif isinstance(current, list | tuple) and part.lstrip("-").isdigit():
            index = int(part)
            if not -len(current) <= index < len(current):
                return False, None
            current = current[index]
        else:
            return False, None
    return True, current


def _dump(state: TaskState) -> CheckedDocument:
    # Checked and encoded once here, not copied again by the store: the dump is fresh.
    try:
        return checked_document(state.model_dump(mode="json"))
    except UnicodeEncodeError as exc:
        # A lone surrogate (hostile model output) cannot become UTF-8 JSON: a typed error
        # naming the problem, and the stored state stays as it was.
        raise StateSerializationError(
            f"the task state holds text that is not UTF-8: {exc}"
        ) from exc


class StateHandle:
    """The task state's session in the store, written only by compare-and-set."""

    def __init__(self, store: StateStore, session_id: str) -> None:
        self.store = store
        self.session_id = session_id
        self.version = 0
        self.riders: RidingWrites | None = None

    def ledger_store(self) -> StateStore | RidingWrites:
        """The store the run's effect ledger writes through: one whose commits ride with
        this handle's next save where the store writes a save and conditional records in
        one transaction (on disk a commit costs an fsync, in memory a turn of the event
        loop), else the store itself."""
        together = getattr(type(self.store), "put_with_records", None)
        if together is None or together is BaseStore.put_with_records:
            return self.store
        if self.riders is None:
            self.riders = RidingWrites(self.store)
        return self.riders

    async def create(self, state: TaskState) -> None:
        snapshot = await self.store.create(self.session_id, _dump(state))
        self.version = snapshot.version

    async def load(self) -> TaskState:
        snapshot = await self.store.get(self.session_id)
        self.version = snapshot.version
        return TaskState.model_validate(snapshot.to_dict())

    async def save(
        self, state: TaskState, records: Sequence[tuple[str, str, Mapping[str, Any]]] = ()
    ) -> None:
        """Compare-and-set the state; ``records`` (hints) and the ledger's waiting commits
        are written with it, in one transaction where the store's class offers
        ``put_with_records``. If the save fails, the ledger's commits are written alone."""
        riders = self.riders
        taken = riders.take() if riders is not None else ([], {})
        try:
            snapshot = await self._save(state, records, taken[0])
        except BaseException:
            if riders is not None and taken[0]:
                riders.give_back(taken)
                # The effects happened whatever became of the state: record them anyway.
                with contextlib.suppress(Exception):
                    await riders.flush()
            raise
        self.version = snapshot.version

    async def _save(
        self,
        state: TaskState,
        records: Sequence[tuple[str, str, Mapping[str, Any]]],
        writes: Sequence[Write],
    ) -> Snapshot:
        data = _dump(state)
        # Looked up on the class: a wrapper that forwards unknown attributes to an inner
        # store must not have its own put skipped.
        together = (
            getattr(type(self.store), "put_with_records", None) if records or writes else None
        )
        if together is not None:
            extra = {"writes": writes} if writes else {}
            snapshot: Snapshot = await together(
                self.store,
                self.session_id,
                data,
                expected_version=self.version,
                records=records,
                **extra,
            )
            return snapshot
        # hints first, as if written when made: a failed put then loses nothing
        for namespace, key, value in records:
            await self.store.record_put(namespace, key, value)
        return await self.store.put(self.session_id, data, expected_version=self.version)
