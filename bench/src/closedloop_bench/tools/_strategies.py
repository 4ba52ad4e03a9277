"""Strategies: how an answer to a task is obtained from a model, and what it cost.

A strategy is anything with a ``name``, a ``fixed`` flag (True for a fixed setting of the
knobs, the points whose frontier the success–cost plane draws) and
``async solve(task, model) -> Attempt``. Two baselines call the model directly, with the
same prompt (:func:`~._prompt.build_messages`):

- ``open_loop``: one call, no grammar; the reply is parsed leniently as JSON calls;
- ``strict``: one call constrained by :func:`~._prompt.strict_schema`.

Agent-based strategies (closedloop with the controller on, with every actuator frozen,
on a model ladder: ``_agents``) plug in through :func:`register_strategy`, fixed settings
with a count (``reask@N``, ``votes@k``: ``_fixed``) through :func:`register_family`.
A strategy may say where it runs (``runs_on``): on ``each`` model of the run (the
default), on the ``strongest`` only (the last listed), or once on the whole ``ladder``
(``solve_ladder(task, models)``). An agent strategy runs its calls through
:class:`TaskTools`, which executes them against the task's toy API (or accepts them, for
a stateless task) and returns the result text a model would see.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import jsonschema

from closedloop import ConfigurationError
from closedloop.models import Completion, Model, ModelRequest

from ._envs import ENVIRONMENTS, CallResult, Environment
from ._format import ToolTask
from ._prompt import build_messages, parse_reply, reply_from_value, strict_schema
from ._score import Call

__all__ = [
    "AGENT_STRATEGY_NAMES",
    "Attempt",
    "OpenLoop",
    "Strict",
    "TaskTools",
    "ToolStrategy",
    "get_tool_strategy",
    "register_family",
    "register_strategy",
    "strategy_names",
]

DEFAULT_MAX_TOKENS = 320
"""The completion budget of one baseline call: the longest ideal answer in the generated
sets (five calls) takes about 200 tokens."""


@dataclass(frozen=True, slots=True)
class Attempt:
    """What one strategy did on one task: its calls, its words, and what they cost.

    ``env_state`` is the toy API's state when the strategy ran the calls itself (an agent);
    None lets the runner replay ``calls`` on a fresh environment (the same thing, since the
    toy APIs are deterministic). ``error`` says why no usable answer came back. An agent's
    ``extra`` holds its halt and its compacted step records (``steps``).
    """

    calls: tuple[Call, ...] = ()
    final_text: str = ""
    model_calls: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    wall_s: float = 0.0
    error: str | None = None
    env_state: Mapping[str, Any] | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def answered(self) -> bool:
        """Whether an answer came back: one with no error, or any words (a reply in prose
        is an answer, a halt or a model error with nothing said is not)."""
        return self.error is None or bool(self.final_text.strip())


@runtime_checkable
class ToolStrategy(Protocol):
    """How an answer is obtained: see the module docstring."""

    @property
    def name(self) -> str: ...

    @property
    def fixed(self) -> bool: ...

    async def solve(self, task: ToolTask, model: Model) -> Attempt: ...


class TaskTools:
    """The tools of one task, executable: a toy API for a stateful task; for a stateless
    one, a stand-in that checks the arguments against the schema and answers with a receipt
    of the call (each call's answer differs, as a real tool's would, so an agent does not
    read several calls in a row as "no new information")."""

    def __init__(self, task: ToolTask) -> None:
        self.task = task
        self.env: Environment | None = (
            None if task.env is None else ENVIRONMENTS[task.env](task.initial_state)
        )
        self.calls: list[Call] = []

    def call(self, name: str, arguments: Mapping[str, Any]) -> CallResult:
        """Run one call (recorded in ``calls`` whatever its outcome)."""
        self.calls.append(Call(name, dict(arguments)))
        if self.env is not None:
            return self.env.call(name, arguments)
        function = self.task.functions.get(name)
        if function is None:
            return CallResult(False, error=f"unknown function {name!r}")
        error = next(
            iter(jsonschema.Draft202012Validator(function.parameters).iter_errors(dict(arguments))),
            None,
        )
        if error is not None:
            return CallResult(False, error=f"bad arguments for {name}: {error.message}")
        return CallResult(True, value={"done": name, "arguments": dict(arguments)})

    def state(self) -> dict[str, Any] | None:
        return None if self.env is None else self.env.state()


def _cost(completion: Completion) -> tuple[int, int]:
    return completion.usage.prompt_tokens, completion.usage.completion_tokens


@dataclass(frozen=True, slots=True)
class OpenLoop:
    """One call, no grammar, the reply parsed leniently."""

    max_tokens: int = DEFAULT_MAX_TOKENS
    clock: Callable[[], float] = time.perf_counter
    name: str = "open_loop"
    fixed: bool = True

    async def solve(self, task: ToolTask, model: Model) -> Attempt:
        started = self.clock()
        completion = await model.complete(
            build_messages(task), ModelRequest(max_tokens=self.max_tokens, temperature=0.0)
        )
        reply = parse_reply(completion.text)
        tokens_in, tokens_out = _cost(completion)
        return Attempt(
            calls=reply.calls,
            final_text=reply.text,
            model_calls=1,
            tokens_in=tokens_in,
            tokens_out=tokens_out,
            wall_s=max(0.0, self.clock() - started),
            error=reply.error,
        )


@dataclass(frozen=True, slots=True)
class Strict:
    """One call constrained by the union of the tools' argument schemas and a no-call branch."""

    max_tokens: int = DEFAULT_MAX_TOKENS
    clock: Callable[[], float] = time.perf_counter
    name: str = "strict"
    fixed: bool = True
    runs_on: str = "each"

    async def solve(self, task: ToolTask, model: Model) -> Attempt:
        started = self.clock()
        request = ModelRequest(
            max_tokens=self.max_tokens, temperature=0.0, response_schema=strict_schema(task)
        )
        completion = await model.complete(build_messages(task), request)
        if completion.parsed is not None:
            reply = reply_from_value(completion.parsed)
        else:
            # A truncated or off-grammar reply (a backend that ignores the schema): the
            # calls it does hold still count, and the schema's complaint is kept.
            reply = parse_reply(completion.text)
            if reply.error is None and completion.parse_error and not reply.calls:
                reply = type(reply)(reply.calls, reply.text, completion.parse_error)
        tokens_in, tokens_out = _cost(completion)
        return Attempt(
            calls=reply.calls,
            final_text=reply.text,
            model_calls=1,
            tokens_in=tokens_in,
            tokens_out=tokens_out,
            wall_s=max(0.0, self.clock() - started),
            error=reply.error or completion.parse_error,
        )


StrategyFactory = Callable[[], ToolStrategy]
FamilyFactory = Callable[[int], ToolStrategy]

_REGISTRY: dict[str, StrategyFactory] = {"open_loop": OpenLoop, "strict": Strict}
_FAMILIES: dict[str, FamilyFactory] = {}

AGENT_STRATEGY_NAMES = ("closedloop", "frozen", "ladder", "reduced")
"""Agent-based strategies the benchmark compares (closedloop with the controller on; with
every actuator frozen at u = 0.5; on a model ladder; with context reduction), plugged in by
:func:`register_strategy` from ``_agents``."""


def register_strategy(name: str, factory: StrategyFactory, *, replace: bool = False) -> None:
    """Make ``name`` runnable: ``factory()`` builds the strategy (the agent hook)."""
    if not isinstance(name, str) or not name.isidentifier():
        raise ConfigurationError("name", name, "must be an identifier")
    if not callable(factory):
        raise ConfigurationError("factory", factory, "must build a ToolStrategy when called")
    if name in _REGISTRY and not replace:
        raise ConfigurationError("name", name, "is registered already (pass replace=True)")
    _REGISTRY[name] = factory


def register_family(name: str, factory: FamilyFactory, *, replace: bool = False) -> None:
    """Make ``name@N`` runnable for every whole N: ``factory(N)`` builds the strategy
    (a fixed setting with a count: ``reask@2``, ``votes@5``)."""
    if not isinstance(name, str) or not name.isidentifier():
        raise ConfigurationError("name", name, "must be an identifier")
    if not callable(factory):
        raise ConfigurationError("factory", factory, "must build a ToolStrategy from a count")
    if name in _FAMILIES and not replace:
        raise ConfigurationError("name", name, "is registered already (pass replace=True)")
    _FAMILIES[name] = factory


def strategy_names() -> tuple[str, ...]:
    """The strategies that can run now (a family as ``name@N``)."""
    return (*_REGISTRY, *(f"{name}@N" for name in _FAMILIES))


def _runnable() -> str:
    return ", ".join(strategy_names())


def get_tool_strategy(name: str) -> ToolStrategy:
    """A fresh strategy by name (``name@N`` for a family)."""
    base, at, count = name.partition("@")
    if at:
        family = _FAMILIES.get(base)
        if family is None:
            raise ConfigurationError("strategy", name, f"unknown; runnable: {_runnable()}")
        try:
            n = int(count)
        except ValueError:
            raise ConfigurationError(
                "strategy", name, f"the count after '@' must be a whole number ({base}@3)"
            ) from None
        strategy = family(n)
    else:
        factory = _REGISTRY.get(name)
        if factory is None:
            if name in AGENT_STRATEGY_NAMES:
                raise ConfigurationError(
                    "strategy",
                    name,
                    "is an agent-based strategy that is not wired yet "
                    "(register_strategy(name, factory) plugs it in)",
                )
            raise ConfigurationError("strategy", name, f"unknown; runnable: {_runnable()}")
        strategy = factory()
    if not isinstance(strategy, ToolStrategy):
        raise ConfigurationError("strategy", name, "its factory did not build a ToolStrategy")
    return strategy
