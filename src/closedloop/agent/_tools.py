"""Tools: anything the loop can call, described by a JSON schema the model and validator share.

A tool can be a typed Python callable (its signature and docstring give the schema, via
pydantic), a function marked with ``@tool(...)``, an :class:`~closedloop.execution.AtomicAction`,
an OpenAI-style function schema with an executor, or a perception ``HttpTool``. Every one
becomes a :class:`Tool` whose ``action`` is an ``AtomicAction`` run through the execution
layer, and whose answers become :class:`~closedloop.perception.Observation`s.

A toolset (an object with a ``__closedloop_tools__()`` method, such as an MCP server from
:mod:`closedloop.integrations`) expands into several tools in a tool list. Tools that share
a resource for the length of a run (a connection) name it as their ``scope``: the run
enters it before its first step and leaves it on every way out.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import inspect
import re
import string
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, overload, runtime_checkable

from pydantic import BaseModel, ValidationError

from .._exceptions import ConfigurationError, ToolError
from ..execution import PROGRAMMING_ERRORS, AtomicAction, EffectClass
from ..perception import HttpTool, Observation
from ..perception._paths import is_blank
from ._tool_schema import schema_of, signature_model

__all__ = [
    "RunScope",
    "Tool",
    "as_tool",
    "requires_nonempty",
    "to_observation",
    "tool",
    "tools_by_name",
]

F = TypeVar("F", bound=Callable[..., Any])
_MARK = "__closedloop_tool__"
_TOOLSET = "__closedloop_tools__"
_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_\-]{0,63}$")
RESERVED_NAMES = frozenset({"final", "final_answer", "plan"})


@runtime_checkable
class RunScope(Protocol):
    """A resource tools share for the length of a run, such as a connection to a server.

    A run enters ``run_scope()`` before its first step and leaves it when the run ends,
    whichever way it ends (an answer, an error, a cancel), so what it holds lives no longer
    than the runs that use it.
    """

    def run_scope(self) -> AbstractAsyncContextManager[object]: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Tool:
    """One callable capability with its JSON-schema contract.

    ``parameters`` is the JSON schema of the arguments object. ``core=False`` marks a step
    the ``dimension_reduction`` protocol may skip. ``phases`` limits the task phases in
    which the tool may run (None: any). ``depends_on`` names tools whose latest answer
    must be a non-empty, usable observation before this one may run: an empty answer is
    "no match found", never "no constraint". ``fills`` maps required task fields to dotted
    paths in this tool's answer (``""`` is the whole value). ``scope`` is a resource the
    tool needs while a run lasts (:class:`RunScope`), shared by the tools of one server.
    """

    name: str
    description: str
    parameters: Mapping[str, Any]
    action: AtomicAction
    core: bool = True
    phases: frozenset[str] | None = None
    depends_on: tuple[str, ...] = ()
    fills: Mapping[str, str] = field(default_factory=dict)
    fixed_timeout: bool = False
    scope: RunScope | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME_RE.match(self.name):
            raise ConfigurationError(
                "name", self.name, "a tool name must be letters, digits, '_' or '-' (max 64)"
            )
        if self.name in RESERVED_NAMES:
            raise ConfigurationError("name", self.name, "is reserved for the loop's own actions")
        if not isinstance(self.parameters, Mapping) or self.parameters.get("type") != "object":
            raise ConfigurationError(
                "parameters", self.parameters, "must be a JSON schema with type 'object'"
            )
        if self.phases is not None:
            object.__setattr__(self, "phases", frozenset(self.phases))
        object.__setattr__(self, "depends_on", tuple(self.depends_on))
        object.__setattr__(self, "fills", dict(self.fills))

    @property
    def effect(self) -> EffectClass:
        """The effect class of the tool's action (read, idempotent write, ...)."""
        return self.action.effect

    def openai_schema(self) -> dict[str, Any]:
        """The tool as an OpenAI ``{"type": "function", ...}`` entry for native tool calling."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": dict(self.parameters),
            },
        }

    @classmethod
    def from_openai(
        cls, schema: Mapping[str, Any], executor: Callable[..., Any], **options: Any
    ) -> Tool:
        """A tool from an OpenAI-style function schema and the callable that runs it.

        ``executor`` is called with the arguments as keyword arguments (sync or async).
        """
        function = schema.get("function") if schema.get("type") == "function" else schema
        if not isinstance(function, Mapping) or "name" not in function:
            raise ConfigurationError(
                "schema", schema, 'must be {"type": "function", "function": {"name", ...}}'
            )
        parameters = function.get("parameters") or {"type": "object", "properties": {}}
        name = str(function["name"])
        action = _action(name, _plain_runner(name, executor, None), options)
        return cls(
            name=name,
            description=str(function.get("description", "")),
            parameters=dict(parameters),
            action=action,
            **_tool_options(options),
        )


# --- runners ------------------------------------------------------------------------------


def _plain_runner(
    name: str, fn: Callable[..., Any], model: type[BaseModel] | None
) -> Callable[..., Any]:
    """An async callable that coerces JSON arguments, then calls the function.

    Arguments that do not fit the signature are the model's mistake: a ``ToolError``, which
    the model sees as an error observation. Once they fit, a ``TypeError``,
    ``AttributeError`` ... from the function is a bug in the tool and propagates, so the run
    ends as ``error`` naming the tool. Without a signature model (``Tool.from_openai``) the
    arguments were never checked, and such an error stays a ``ToolError``.
    """
    is_async = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004
    )

    async def run(**arguments: Any) -> Any:
        values = arguments
        if model is not None:
            try:
                parsed = model.model_validate(arguments)
            except ValidationError as exc:
                raise ToolError(f"{name}: arguments do not fit the signature: {exc}") from None
            values = {key: getattr(parsed, key) for key in type(parsed).model_fields}
        try:
            if is_async:
                result = await fn(**values)
            else:
                result = await asyncio.to_thread(lambda: fn(**values))
                if inspect.isawaitable(result):
                    result = await result
        except PROGRAMMING_ERRORS as exc:
            if model is not None:
                raise  # the arguments were valid: this is the tool's own bug
            raise ToolError(f"{name} raised {type(exc).__name__}: {exc}") from exc
        return result

    run.__name__ = name
    return run


_ACTION_OPTIONS = (
    "effect",
    "preconditions",
    "postconditions",
    "timeout_s",
    "compensation",
    "reconciler",
    "requires_confirmation",
    "volatile_fields",
    "uncertain_errors",
)
_TOOL_OPTIONS = ("core", "phases", "depends_on", "fills")


def _action(name: str, fn: Callable[..., Any], options: Mapping[str, Any]) -> AtomicAction:
    kwargs = {k: options[k] for k in _ACTION_OPTIONS if k in options}
    unknown = set(options) - set(_ACTION_OPTIONS) - set(_TOOL_OPTIONS) - {"description"}
    if unknown:
        raise ConfigurationError("tool options", sorted(unknown), "unknown option names")
    return AtomicAction(name=name, fn=fn, **kwargs)


def _tool_options(options: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: options[k] for k in _TOOL_OPTIONS if k in options}
    if "timeout_s" in options and options["timeout_s"] is not None:
        out["fixed_timeout"] = True
    return out


_SIGNATURES: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()
"""Per function, per name: its arguments model, summary and schema. An agent built per run
(a service's factory) would otherwise build the same pydantic model again each time."""


def _signature(fn: Callable[..., Any], name: str) -> tuple[type[BaseModel], str, dict[str, Any]]:
    try:
        known = _SIGNATURES.get(fn)
    except TypeError:  # an unhashable callable object: nothing to key on
        known = None
    found = None if known is None else known.get(name)
    if found is None:
        model, summary = signature_model(fn, name)
        found = (model, summary, schema_of(model))
        with contextlib.suppress(TypeError):  # not weakly referable: build it each time
            _SIGNATURES.setdefault(fn, {})[name] = found
    model, summary, schema = found
    return model, summary, copy.deepcopy(schema)  # each Tool owns its schema, as before


def _from_callable(fn: Callable[..., Any], options: Mapping[str, Any]) -> Tool:
    given = options.get("name")
    name = str(getattr(fn, "__name__", "") if given is None else given)
    model, summary, parameters = _signature(fn, name or "tool")
    rest = {k: v for k, v in options.items() if k != "name"}
    return Tool(
        name=name,
        description=str(rest.get("description") or summary or name),
        parameters=parameters,
        action=_action(name, _plain_runner(name, fn, model), rest),
        **_tool_options(rest),
    )


def _from_action(action: AtomicAction, options: Mapping[str, Any]) -> Tool:
    parameters = options.get("parameters")
    description = options.get("description") or action.description
    if parameters is None:
        model, summary = signature_model(action.fn, action.name)
        parameters = schema_of(model)
        description = description or summary
    return Tool(
        name=str(options.get("name") or action.name),
        description=str(description or action.name),
        parameters=dict(parameters),
        action=action,
        fixed_timeout=action.timeout_s is not None,
        **{k: options[k] for k in _TOOL_OPTIONS if k in options},
    )


def _from_http(http: HttpTool, options: Mapping[str, Any]) -> Tool:
    parameters = options.get("parameters")
    if parameters is None:
        names = [f for _, f, _, _ in string.Formatter().parse(http.url) if f]
        parameters = {
            "type": "object",
            "properties": {n: {"type": "string"} for n in names},
            "required": names,
        }

    async def call(**arguments: Any) -> Observation:
        return await http(arguments)

    call.__name__ = http.name
    rest = {k: v for k, v in options.items() if k not in ("parameters", "name")}
    return Tool(
        name=str(options.get("name") or http.name),
        description=str(rest.get("description") or f"{http.method} {http.url}"),
        parameters=dict(parameters),
        action=_action(http.name, call, rest),
        **_tool_options(rest),
    )


@overload
def tool(fn: F, /) -> F: ...
@overload
def tool(
    fn: None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    **options: Any,
) -> Callable[[F], F]: ...
def tool(
    fn: F | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    **options: Any,
) -> F | Callable[[F], F]:
    """Mark a typed function as a tool; it stays an ordinary function.

    ``@tool`` or ``@tool(core=False, effect="irreversible", depends_on=("search",))``. The
    options are those of :class:`Tool` (``core``, ``phases``, ``depends_on``, ``fills``)
    and of ``AtomicAction`` (``effect``, ``preconditions``, ``timeout_s``, ...).
    """

    def mark(func: F) -> F:
        built = _from_callable(func, {"name": name, "description": description, **options})
        setattr(func, _MARK, built)
        return func

    return mark(fn) if fn is not None else mark


def as_tool(obj: Any, **options: Any) -> Tool:
    """Turn any supported tool form into a :class:`Tool` (``options`` override its settings)."""
    if isinstance(obj, Tool):
        if not options:
            return obj
        if "phases" in options and options["phases"] is not None:
            options = {**options, "phases": frozenset(options["phases"])}
        return dataclasses.replace(obj, **options)
    marked = getattr(obj, _MARK, None)
    if isinstance(marked, Tool):
        return as_tool(marked, **options)
    if isinstance(obj, AtomicAction):
        return _from_action(obj, options)
    if isinstance(obj, HttpTool):
        return _from_http(obj, options)
    if isinstance(obj, tuple) and len(obj) == 2 and isinstance(obj[0], Mapping):
        return Tool.from_openai(obj[0], obj[1], **options)
    if isinstance(obj, Mapping):
        raise ConfigurationError(
            "tool", obj, "an OpenAI-style schema needs its executor: pass (schema, executor)"
        )
    if callable(getattr(obj, _TOOLSET, None)):
        raise ConfigurationError(
            "tool", obj, "is a toolset of several tools: pass it in the tools list"
        )
    if callable(obj):
        return _from_callable(obj, options)
    raise ConfigurationError("tool", obj, "is not a callable, Tool, AtomicAction or HttpTool")


def tools_by_name(tools: Iterable[Any] | Mapping[str, Any]) -> dict[str, Tool]:
    """Normalise a list (or a name → tool mapping) of tools; names must be unique."""
    items: Sequence[tuple[str | None, Any]]
    if isinstance(tools, Mapping):
        items = list(tools.items())
    elif isinstance(tools, str | bytes) or not isinstance(tools, Iterable):
        raise ConfigurationError("tools", tools, "must be a list of tools or a name -> tool map")
    else:
        items = [(None, t) for t in tools]
    out: dict[str, Tool] = {}
    for key, item in items:
        expand = getattr(item, _TOOLSET, None)
        if callable(expand) and not isinstance(item, Tool):
            if key is not None:
                raise ConfigurationError(
                    "tools", key, "a toolset expands into several tools: list it, do not name it"
                )
            built_tools = [as_tool(t) for t in expand()]
        else:
            built_tools = [as_tool(item) if key is None else as_tool(item, name=key)]
        for built in built_tools:
            if built.name in out:
                raise ConfigurationError("tools", built.name, "two tools share this name")
            out[built.name] = built
    return out


# --- answers into observations ----------------------------------------------------------


def to_observation(result: Any, *, source: str, timestamp: float) -> Observation:
    """A tool's plain return value as an observation.

    An ``Observation`` passes through. ``None``, ``[]``, ``{}`` and blank text are status
    ``empty`` ("no match found; this is not the absence of a constraint"); anything else
    is ``ok``. Pydantic models and dataclasses are dumped to JSON data first.
    """
    if isinstance(result, Observation):
        return result
    replayed = _as_stored_observation(result)
    if replayed is not None:
        # The effect ledger hands back an observation's stored JSON on replay or
        # reconciliation; it must read as the observation it was, not as an ok wrapper.
        return replayed
    if isinstance(result, BaseModel):
        result = result.model_dump(mode="json")
    elif dataclasses.is_dataclass(result) and not isinstance(result, type):
        result = dataclasses.asdict(result)
    if is_blank(result):
        return Observation.empty(source=source, value=result, timestamp=timestamp, raw=result)
    return Observation.ok(result, source=source, timestamp=timestamp)


_OBSERVATION_REQUIRED = frozenset(
    {"value", "confidence", "timestamp", "source", "status", "meaning"}
)


def _as_stored_observation(result: Any) -> Observation | None:
    if not isinstance(result, Mapping) or not result.keys() >= _OBSERVATION_REQUIRED:
        return None
    if not result.keys() <= Observation.model_fields.keys():
        return None
    try:
        return Observation.model_validate(dict(result))
    except ValueError:
        return None


def requires_nonempty(*tools: str) -> Callable[[Any, Mapping[str, Any]], bool | str]:
    """A precondition: each named tool's latest answer is usable and not empty.

    For ``AtomicAction(preconditions=[requires_nonempty("availability")])``: the loop
    passes the task state (with ``latest``, the newest observation per tool) to
    preconditions, so an action that needs a real answer is never run on "no match".
    """
    if not tools:
        raise ConfigurationError("tools", tools, "name at least one tool")

    def check(_args: Any, state: Mapping[str, Any]) -> bool | str:
        latest = state.get("latest") or {}
        for name in tools:
            seen = latest.get(name)
            if seen is None:
                return f"{name} has not answered yet"
            status = seen.get("status")
            if status != "ok":
                return (
                    f"{name} answered {status!r} ({seen.get('meaning', '')}); an explicit, "
                    "non-empty answer is required first"
                )
        return True

    check.__name__ = f"requires_nonempty({', '.join(tools)})"
    return check
