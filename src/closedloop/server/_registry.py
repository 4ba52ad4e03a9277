"""The agents a service can run: the reference agents, plus any registered in Python.

The reference agents are whatever installed distributions declare in the
``closedloop.agents`` entry-point group (closedloop-bench declares its four); a factory
there may ask for ``model``, ``store``, ``base_url``, ``world_url``, ``params`` and
``trace`` by name, or take ``**options``.

    from closedloop.agent import Agent, Runtime
    from closedloop.server import AgentRegistry, ServerSettings, create_app

    registry = AgentRegistry.with_reference()
    registry.register("calc", lambda ctx: Agent(ctx.model, [add], runtime=Runtime(store=ctx.store)))
    app = create_app(ServerSettings(registry=registry))

A factory receives an :class:`AgentContext` and returns an ``Agent`` (or an awaitable of
one) built on ``ctx.store``: that store is the calling key's own view of the state, and
the service refuses an agent built on another, since its task state, ledger and
handovers would land where the key cannot see them. A factory may instead return a
*runner*: any object with that ``store``, ``async run(task, *, session_id)`` and
``async resume(handover_id, task)`` (the reference agents are runners); it should send
its steps to ``ctx.trace``. Factories are called again to resume a task after a
handover, possibly in another process, so they must not rely on state kept between
calls other than through the store.
"""

from __future__ import annotations

import inspect
import re
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any, TypeAlias

from .._exceptions import ConfigurationError
from ..agent import Agent, Task, TraceSink
from ..feedback import StateStore
from ..models import Model

__all__ = [
    "AGENT_ENTRY_POINT_GROUP",
    "AgentContext",
    "AgentFactory",
    "AgentRegistry",
    "AgentSpec",
    "TaskBuilder",
    "default_registry",
    "is_runner",
]

AGENT_ENTRY_POINT_GROUP = "closedloop.agents"
"""The entry-point group whose factories :meth:`AgentRegistry.with_reference` lists."""

_NAME = re.compile(r"^[a-z0-9][a-z0-9_.\-]{0,63}$")


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentContext:
    """What a factory builds an agent from.

    ``model`` is the service's model (metered); ``store`` is the calling key's scoped
    store; ``params`` are the run request's ``params`` (JSON); ``world_url`` is the
    world the reference agents talk to, when the service was given one; ``trace`` is
    where a runner sends its steps (an ``Agent`` gets it at each run); ``tool_transport``
    is the ``httpx`` transport through the tools' limiters (a reference factory that
    takes ``transport`` gets it).
    """

    model: Model
    store: StateStore
    session_id: str
    run_id: str
    params: Mapping[str, Any] = field(default_factory=dict)
    world_url: str | None = None
    trace: TraceSink | None = None
    tool_transport: Any = None


AgentFactory: TypeAlias = Callable[[AgentContext], Any]
"""``factory(ctx) -> Agent | runner`` (or an awaitable of either)."""
TaskBuilder: TypeAlias = Callable[[str, AgentContext], Any]
"""``task(text, ctx) -> Task`` for an ``Agent``, or what the runner's ``run`` takes."""


@dataclass(frozen=True, slots=True)
class AgentSpec:
    """A registered agent: its name, factory, description and optional task builder.

    ``task`` turns the request's text into a ``Task`` (required fields, complexity,
    context); without it the task is the text with the agent's own required fields.
    """

    name: str
    factory: AgentFactory
    description: str = ""
    task: TaskBuilder | None = None
    source: str = "user"
    needs_world: bool = False


class AgentRegistry:
    """Name → :class:`AgentSpec`. Thread-safe; names are lower-case ids."""

    def __init__(self) -> None:
        self._specs: dict[str, AgentSpec] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"AgentRegistry({sorted(self._specs)})"

    @classmethod
    def with_reference(cls) -> AgentRegistry:
        """A registry holding the reference agents that this installation has."""
        registry = cls()
        for spec in reference_agents():
            registry.add(spec)
        return registry

    def register(
        self,
        name: str,
        factory: AgentFactory,
        *,
        description: str = "",
        task: TaskBuilder | None = None,
        replace: bool = False,
    ) -> AgentSpec:
        """Register ``factory`` under ``name``; ``replace=True`` to overwrite a name."""
        if not callable(factory):
            raise ConfigurationError("factory", factory, "must be callable: factory(ctx) -> Agent")
        if task is not None and not callable(task):
            raise ConfigurationError("task", task, "must be callable: task(text, ctx) -> Task")
        if not isinstance(description, str):
            raise ConfigurationError("description", description, "must be a string")
        spec = AgentSpec(name=name, factory=factory, description=description, task=task)
        return self.add(spec, replace=replace)

    def add(self, spec: AgentSpec, *, replace: bool = False) -> AgentSpec:
        """Register a ready :class:`AgentSpec`."""
        if not isinstance(spec.name, str) or not _NAME.match(spec.name):
            raise ConfigurationError(
                "name", spec.name, "must be 1-64 of a-z, 0-9, '_', '.', '-', starting alnum"
            )
        with self._lock:
            if spec.name in self._specs and not replace:
                raise ConfigurationError(
                    "name", spec.name, "is already registered (pass replace=True to overwrite)"
                )
            self._specs[spec.name] = spec
        return spec

    def unregister(self, name: str) -> bool:
        """Remove ``name``; True if it was registered."""
        with self._lock:
            return self._specs.pop(name, None) is not None

    def get(self, name: str) -> AgentSpec:
        """The spec of ``name``; ``ConfigurationError`` listing the known names otherwise."""
        with self._lock:
            spec = self._specs.get(name)
            known = sorted(self._specs)
        if spec is None:
            raise ConfigurationError(
                "agent", name, f"is not registered; known: {', '.join(known) or '(none)'}"
            )
        return spec

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def __iter__(self) -> Iterator[AgentSpec]:
        with self._lock:
            specs = sorted(self._specs.values(), key=lambda s: s.name)
        return iter(specs)

    def __len__(self) -> int:
        return len(self._specs)

    async def build(self, name: str, ctx: AgentContext) -> Any:
        """Build agent ``name`` for ``ctx``: an ``Agent`` or a runner.

        Raises ``ConfigurationError`` when the factory returns neither, or one that is not
        on ``ctx.store``.
        """
        spec = self.get(name)
        if spec.needs_world and ctx.world_url is None:
            raise ConfigurationError(
                "agent", name, "needs the world: start the service with --world URL"
            )
        made = spec.factory(ctx)
        agent = await made if inspect.isawaitable(made) else made
        if not isinstance(agent, Agent) and not is_runner(agent):
            raise ConfigurationError(
                "factory",
                spec.name,
                f"returned {type(agent).__name__}, not an Agent or a runner "
                "(store, async run(task, *, session_id), async resume(handover_id, task))",
            )
        if getattr(agent, "store", None) is not ctx.store:
            raise ConfigurationError(
                "factory",
                spec.name,
                "built its Agent on another store; pass runtime=Runtime(store=ctx.store) "
                "(the key's own state)",
            )
        return agent

    def task_for(
        self, name: str, text: str, ctx: AgentContext, agent: Any, task_id: str | None = None
    ) -> Any:
        """What the agent runs: for an ``Agent``, a ``Task`` (the spec's builder, else the
        text with the agent's required fields) whose id is ``task_id`` or else the run id,
        so the ledger and the state follow it; for a runner, the builder's value or the
        text."""
        spec = self.get(name)
        task_id = task_id or ctx.run_id
        if not isinstance(agent, Agent):
            return spec.task(text, ctx) if spec.task is not None else text
        if spec.task is not None:
            built = spec.task(text, ctx)
            if not isinstance(built, Task):
                raise ConfigurationError("task", spec.name, "the task builder must return a Task")
            return Task(
                built.prompt,
                required_fields=built.required_fields,
                task_id=task_id,
                complexity=built.complexity,
                context=built.context,
            )
        return Task(text, required_fields=agent.required_fields, task_id=task_id)


# --- the reference agents ------------------------------------------------------------------


def is_runner(value: object) -> bool:
    """Whether ``value`` can be run like a reference agent (see the module docstring)."""
    run, resume = getattr(value, "run", None), getattr(value, "resume", None)
    return (
        hasattr(value, "store")
        and inspect.iscoroutinefunction(run)
        and inspect.iscoroutinefunction(resume)
    )


def _reference_factory(function: Callable[..., Any]) -> AgentFactory:
    parameters = inspect.signature(function).parameters
    accepted = set(parameters)
    open_ended = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())

    def factory(ctx: AgentContext) -> Any:
        values: dict[str, Any] = {
            "model": ctx.model,
            "store": ctx.store,
            "base_url": ctx.world_url,
            "world_url": ctx.world_url,
            "params": dict(ctx.params),
            "trace": ctx.trace,
            "transport": ctx.tool_transport,
        }
        if ctx.tool_transport is None:
            values.pop("transport")
        if "base_url" in accepted and "world_url" not in accepted:
            values.pop("world_url")
        return function(
            **{
                k: v
                for k, v in values.items()
                if k in accepted or (open_ended and k in ("trace", "transport"))
            }
        )

    factory.__doc__ = function.__doc__
    factory.__qualname__ = f"{function.__module__}.{function.__qualname__}"
    return factory


def reference_agents() -> list[AgentSpec]:
    """The agents installed distributions declare in the ``closedloop.agents`` group.

    Each entry names a factory function (``weather =
    "package.module:build_weather_agent"``); the library finds it through the installed
    metadata and never imports a distribution by name. An entry that cannot be loaded
    (a dependency of it missing) is skipped, so the service still starts; the first of
    two entries with one name wins (an editable and a regular install of one
    distribution).
    """
    specs: dict[str, AgentSpec] = {}
    for entry in sorted(entry_points(group=AGENT_ENTRY_POINT_GROUP), key=lambda e: e.name):
        if entry.name in specs or not _NAME.match(entry.name):
            continue
        try:
            function = entry.load()
        except ImportError:
            continue
        if not callable(function):
            raise ConfigurationError(
                f"entry point {AGENT_ENTRY_POINT_GROUP}:{entry.name}",
                entry.value,
                "must name a callable that builds an agent",
            )
        params = set(inspect.signature(function).parameters)
        module = inspect.getmodule(function)
        doc = (inspect.getdoc(module) if module else None) or inspect.getdoc(function) or ""
        specs[entry.name] = AgentSpec(
            name=entry.name,
            factory=_reference_factory(function),
            description=doc.split("\n\n", 1)[0].replace("\n", " "),
            source="reference",
            needs_world=bool(params & {"base_url", "world_url"}),
        )
    return list(specs.values())


_default: AgentRegistry | None = None
_default_lock = threading.Lock()


def default_registry() -> AgentRegistry:
    """The process-wide registry ``create_app`` uses when none is given (reference agents
    first; ``default_registry().register(...)`` adds yours)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = AgentRegistry.with_reference()
        return _default
