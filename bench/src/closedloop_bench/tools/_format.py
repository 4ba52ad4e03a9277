"""The tool-calling task file: one JSON object per line, validated with clear errors.

A task is what a user asks (``messages``), the functions offered to the model (``tools``,
OpenAI-style function schemas) and the outcome a checker accepts (``expected``)::

    {"id": "weather-0001", "family": "single", "domain": "weather", "split": "dev",
     "messages": [{"role": "user", "content": "Weather in Oslo, in celsius?"}],
     "tools": [{"type": "function", "function": {"name": "get_weather",
                "description": "Current weather for a city.",
                "parameters": {"type": "object",
                               "properties": {"city": {"type": "string"},
                                              "unit": {"type": "string",
                                                       "enum": ["celsius", "fahrenheit"]}},
                               "required": ["city"]}}}],
     "expected": {"calls": [{"name": "get_weather",
                             "arguments": {"city": {"text": "Oslo"},
                                           "unit": {"exact": "celsius"}}}]}}

``family`` is one of ``single``, ``choose``, ``parallel``, ``irrelevance``, ``multi_turn``;
``split`` is ``dev`` or ``eval``. ``expected`` is either ``{"no_call": true}`` (no offered
function fits: the right answer is no call) or ``{"calls": [...], "order": "any"}``
(``"sequence"`` when the calls must come in the listed order). Each expected argument has
one rule:

- ``{"exact": v}``: equal as JSON values (``3`` equals ``3.0``);
- ``{"one_of": [v, w]}``: equal to one of the listed values (an enum of accepted answers);
- ``{"number": x, "tol": t}``: a number within ``t`` of ``x`` (absolute, default 1e-6);
- ``{"text": s}``: a string equal to ``s`` up to case and surrounding whitespace;
- ``{"any": true}``: any value;

and ``"optional": true`` lets the argument be left out. An argument the call passes that
the expected call does not list makes the call wrong.

A stateful task (``multi_turn``) names a toy environment (``env``: ``todo``, ``ledger``,
``calendar``, ``inventory``, ``files``), its ``initial_state`` and ``final_state``: the
values that the listed top-level keys of the environment's state must hold once the
calls have run. Its ``tools`` must be functions of that environment.

``load_tool_tasks(path)`` raises :class:`TaskFileError` naming the line, the field and why
(the same error, and the same conventions, as the refinement benchmark's task files);
:func:`describe_tool_tasks` lists what a file holds, as ``--explain`` prints it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

import jsonschema
from jsonschema.exceptions import SchemaError
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from closedloop import ConfigurationError
from closedloop.harness import TaskFileError

from ._envs import ENVIRONMENTS

__all__ = [
    "FAMILIES",
    "ONE_CALL_FAMILIES",
    "ArgRule",
    "Expected",
    "ExpectedCall",
    "FunctionDef",
    "TaskFileError",
    "TaskMessage",
    "ToolSchema",
    "ToolTask",
    "describe_tool_tasks",
    "dump_tasks",
    "load_tool_tasks",
    "parse_task",
]

FAMILIES = ("single", "choose", "parallel", "irrelevance", "multi_turn")
ONE_CALL_FAMILIES = ("single", "choose")
"""The families whose request is one action: one offered function, called once, completes it."""
Family = Literal["single", "choose", "parallel", "irrelevance", "multi_turn"]

_STRICT = ConfigDict(frozen=True, extra="forbid")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")


class FunctionDef(BaseModel):
    """An OpenAI-style function: a name, what it does, a JSON Schema of its arguments."""

    model_config = _STRICT
    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _NAME.fullmatch(value):
            raise ValueError(f"{value!r} is not a function name (letters, digits, _ . -)")
        return value

    @field_validator("parameters")
    @classmethod
    def _parameters(cls, value: dict[str, Any]) -> dict[str, Any]:
        if value.get("type") != "object":
            raise ValueError('must be a JSON Schema with "type": "object"')
        try:
            jsonschema.validators.validator_for(value).check_schema(value)
        except SchemaError as exc:
            raise ValueError(f"not a valid JSON Schema: {exc.message}") from None
        properties = value.get("properties", {})
        if not isinstance(properties, dict):
            raise ValueError('"properties" must be an object')
        unknown = sorted(set(value.get("required", [])) - set(properties))
        if unknown:
            raise ValueError(f"required names no property: {', '.join(unknown)}")
        return value

    @property
    def properties(self) -> dict[str, Any]:
        props: dict[str, Any] = self.parameters.get("properties", {})
        return props

    @property
    def required(self) -> tuple[str, ...]:
        return tuple(self.parameters.get("required", ()))


class ToolSchema(BaseModel):
    """One offered tool, ``{"type": "function", "function": {...}}``."""

    model_config = _STRICT
    type: Literal["function"] = "function"
    function: FunctionDef


class TaskMessage(BaseModel):
    """One chat message of the task (the user's turns, and any earlier turns)."""

    model_config = _STRICT
    role: Literal["system", "user", "assistant", "tool"]
    content: str


_RULE_KINDS = ("exact", "one_of", "number", "text", "any")


class ArgRule(BaseModel):
    """How one argument of an expected call is matched (exactly one kind per rule)."""

    model_config = _STRICT
    exact: Any = None
    one_of: list[Any] | None = None
    number: float | None = None
    tol: float = Field(default=1e-6, ge=0.0)
    text: str | None = None
    any: bool = False
    optional: bool = False

    @model_validator(mode="after")
    def _one_kind(self) -> ArgRule:
        kinds = [k for k in _RULE_KINDS if self.kind_set(k)]
        if len(kinds) != 1:
            raise ValueError(
                f"a rule needs exactly one of {', '.join(_RULE_KINDS)}; got {kinds or 'none'}"
            )
        if self.one_of is not None and not self.one_of:
            raise ValueError("one_of must list at least one value")
        return self

    def kind_set(self, kind: str) -> bool:
        if kind == "exact":
            return "exact" in self.model_fields_set
        if kind == "any":
            return self.any
        return getattr(self, kind) is not None

    @property
    def kind(self) -> str:
        return next(k for k in _RULE_KINDS if self.kind_set(k))


class ExpectedCall(BaseModel):
    """A call the checker expects: the function's name and a rule per argument."""

    model_config = _STRICT
    name: str
    arguments: dict[str, ArgRule] = Field(default_factory=dict)


class Expected(BaseModel):
    """What counts as solved: the expected calls, or no call at all."""

    model_config = _STRICT
    no_call: bool = False
    calls: list[ExpectedCall] = Field(default_factory=list)
    order: Literal["any", "sequence"] = "any"

    @model_validator(mode="after")
    def _calls_or_none(self) -> Expected:
        if self.no_call and self.calls:
            raise ValueError("no_call is true but calls are listed")
        if not self.no_call and not self.calls:
            raise ValueError('list the expected calls, or set "no_call": true')
        return self


class ToolTask(BaseModel):
    """One tool-calling task (see the module docstring for the file format)."""

    model_config = _STRICT
    id: str = Field(min_length=1)
    family: Family
    domain: str = Field(min_length=1)
    split: Literal["dev", "eval"]
    messages: list[TaskMessage] = Field(min_length=1)
    tools: list[ToolSchema] = Field(min_length=1)
    expected: Expected
    env: str | None = None
    initial_state: dict[str, Any] | None = None
    final_state: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _consistent(self) -> ToolTask:
        names = [t.function.name for t in self.tools]
        seen: set[str] = set()
        for index, name in enumerate(names):
            if name in seen:
                raise _FieldError(f"tools[{index}].function.name", f"duplicate function {name!r}")
            seen.add(name)
        functions = self.functions
        for index, call in enumerate(self.expected.calls):
            where = f"expected.calls[{index}]"
            if call.name not in functions:
                raise _FieldError(
                    f"{where}.name",
                    f"unknown function {call.name!r} (tools: {', '.join(names)})",
                )
            known = functions[call.name].properties
            for arg in call.arguments:
                if arg not in known:
                    raise _FieldError(
                        f"{where}.arguments.{arg}",
                        f"{call.name} has no parameter {arg!r} (has: {', '.join(known) or 'none'})",
                    )
        if self.family == "irrelevance" and not self.expected.no_call:
            raise _FieldError("expected", 'an irrelevance task expects {"no_call": true}')
        self._check_env()
        return self

    def _check_env(self) -> None:
        if self.env is None:
            if self.family == "multi_turn":
                raise _FieldError("env", "a multi_turn task names its environment")
            if self.initial_state is not None or self.final_state is not None:
                raise _FieldError("env", "initial_state and final_state need an env")
            return
        if self.env not in ENVIRONMENTS:
            raise _FieldError(
                "env", f"unknown environment {self.env!r} (known: {', '.join(ENVIRONMENTS)})"
            )
        env_cls = ENVIRONMENTS[self.env]
        for index, tool in enumerate(self.tools):
            if tool.function.name not in env_cls.function_names():
                raise _FieldError(
                    f"tools[{index}].function.name",
                    f"{tool.function.name!r} is not a function of the {self.env} environment "
                    f"({', '.join(env_cls.function_names())})",
                )
        if self.final_state is None:
            raise _FieldError("final_state", "a stateful task needs a final_state check")
        try:
            env = env_cls(self.initial_state)
        except ValueError as exc:
            raise _FieldError("initial_state", str(exc)) from None
        unknown = sorted(set(self.final_state) - set(env.state()))
        if unknown:
            raise _FieldError(
                "final_state", f"names no part of the {self.env} state: {', '.join(unknown)}"
            )

    @property
    def functions(self) -> dict[str, FunctionDef]:
        """The offered functions by name."""
        return {t.function.name: t.function for t in self.tools}

    def tool_dicts(self) -> list[dict[str, Any]]:
        """The tools as plain OpenAI-style dicts."""
        return [t.model_dump(mode="json") for t in self.tools]


class _FieldError(ValueError):
    """A cross-field check that names its own field (pydantic would say only the model)."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(reason)
        self.field = field
        self.reason = reason


def _describe(exc: ValidationError) -> tuple[str, str]:
    err = exc.errors()[0]
    ctx_error = (err.get("ctx") or {}).get("error")
    if isinstance(ctx_error, _FieldError):
        return ctx_error.field, ctx_error.reason
    field = ".".join(str(p) if not isinstance(p, int) else f"[{p}]" for p in err["loc"])
    field = field.replace(".[", "[") or "(task)"
    message = str(err["msg"]).removeprefix("Value error, ")
    if err["type"] == "missing":
        message = "missing (required)"
    return field, message


def parse_task(data: object, *, source: str = "<task>", line: int = 1) -> ToolTask:
    """A :class:`ToolTask` from a decoded JSON value, or a :class:`TaskFileError`."""
    if not isinstance(data, Mapping):
        raise TaskFileError(source, line, "(task)", "each line must be a JSON object")
    try:
        return ToolTask.model_validate(dict(data))
    except ValidationError as exc:
        field, reason = _describe(exc)
        raise TaskFileError(source, line, field, reason) from None


def load_tool_tasks(path: str | Path) -> list[ToolTask]:
    """Every task of a JSONL file (blank lines skipped); ids must be unique."""
    file = Path(path)
    if not file.is_file():
        raise ConfigurationError("path", str(path), "is not a task file")
    tasks: list[ToolTask] = []
    ids: dict[str, int] = {}
    with file.open(encoding="utf-8") as handle:
        for number, text in enumerate(handle, start=1):
            if not text.strip():
                continue
            try:
                data = json.loads(text)
            except json.JSONDecodeError as exc:
                raise TaskFileError(str(file), number, "(json)", f"not JSON: {exc.msg}") from None
            task = parse_task(data, source=str(file), line=number)
            if task.id in ids:
                raise TaskFileError(
                    str(file), number, "id", f"{task.id!r} repeats line {ids[task.id]}"
                )
            ids[task.id] = number
            tasks.append(task)
    if not tasks:
        raise ConfigurationError("path", str(path), "holds no tasks")
    return tasks


def _rule_text(rule: ArgRule) -> str:
    kind = rule.kind
    if kind == "any":
        text = "any"
    elif kind == "number":
        text = f"{rule.number:g} ± {rule.tol:g}"
    elif kind == "text":
        text = f"text {rule.text!r}"
    elif kind == "one_of":
        text = f"one of {json.dumps(rule.one_of, ensure_ascii=False)}"
    else:
        text = json.dumps(rule.exact, ensure_ascii=False)
    return text + (" (optional)" if rule.optional else "")


def describe_tool_tasks(tasks: Iterable[ToolTask]) -> str:
    """Each task for a person: its id and family, the offered tools, what a checker accepts."""
    out: list[str] = []
    for task in tasks:
        out.append(f"{task.id}: {task.family}, {task.domain}, tools {', '.join(task.functions)}")
        for message in task.messages:
            out.append(f"  {message.role}: {message.content}")
        if task.expected.no_call:
            out.append("  expected: no call")
        for call in task.expected.calls:
            args = ", ".join(f"{k}={_rule_text(r)}" for k, r in call.arguments.items())
            out.append(f"  expected: {call.name}({args})")
        if len(task.expected.calls) > 1:
            out.append(f"  order: {task.expected.order}")
        if task.env is not None:
            out.append(f"  env: {task.env}, final state of {', '.join(task.final_state or {})}")
    return "\n".join(out) + "\n"


def dump_tasks(tasks: Iterable[ToolTask]) -> str:
    """The JSONL text of ``tasks``: one compact line each, keys in a fixed order."""
    lines = [
        json.dumps(t.model_dump(mode="json", exclude_unset=True), ensure_ascii=False) for t in tasks
    ]
    return "".join(line + "\n" for line in lines)
