"""LangGraph adapter: a graph node or runnable under closed-loop control.

Needs the optional extra: ``pip install closedloop[langgraph]``. Import it explicitly
(``from closedloop.integrations.langgraph import controlled_node``); the rest of
closedloop never imports LangGraph.

``controlled_node(fn)`` senses the node's output (its state update), runs the PID of the
node and retries failed attempts with the scheduled delay, exactly like ``@controlled``.
Unlike LangGraph's own ``RetryPolicy`` (which retries exceptions after a fixed backoff and
leaves no trace in the state) it also retries answers that came back but are not good
enough (empty, missing key fields), raises the rigour the node sees on each retry, and
appends one signal record per call to the graph state under ``state_key``::

    class State(ControlState):          # declares "closedloop" with an add reducer
        city: str
        forecast: dict

    graph.add_node("fetch", controlled_node(fetch, key_fields=["forecast.temp"]))

The state schema must declare ``state_key`` (LangGraph drops unknown keys silently);
:class:`ControlState` does so for the default key, as a list that every node appends to.
A node that fails after its last attempt raises as before, and nothing is written.
"""

from __future__ import annotations

import dataclasses
import operator
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, TypedDict, Unpack, cast

try:
    from langchain_core.runnables import Runnable, RunnableConfig
    from langgraph.config import get_config
    from langgraph.types import Command
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError(
        "closedloop.integrations.langgraph needs LangGraph: pip install 'closedloop[langgraph]'"
    ) from exc

from .._exceptions import ConfigurationError
from ._decorator import ControlOptions, accepts, attempt_wrapper, build_plan
from ._engine import Attempts, RetryPlan, awaitable_sleep, run_async, run_sync
from ._loop import ControlContext, ControlLoop, ControlRecord
from ._metrics import Invocation

__all__ = ["ControlState", "ControlledRunnable", "controlled_node", "signal_record"]


class ControlState(TypedDict, total=False):
    """A state mixin with the default ``closedloop`` key: a list every node appends to."""

    closedloop: Annotated[list[dict[str, Any]], operator.add]


def signal_record(key: str, records: Sequence[ControlRecord]) -> dict[str, Any]:
    """The JSON-ready summary of one call that goes into the graph state."""
    if not records:
        raise ConfigurationError("records", records, "a call has at least one attempt")
    last = records[-1]
    return {
        "node": key,
        "call": last.call,
        "attempts": len(records),
        "errors": [r.error for r in records],
        "u": [r.u for r in records],
        "exceptions": [r.exception for r in records],
        "error": last.error,
        "failed": last.failed,
        "settings": last.settings.as_dict(),
    }


def _node_name(default: str) -> str:
    try:
        config = get_config()
    except RuntimeError:  # called outside a running graph
        return default
    name = config.get("metadata", {}).get("langgraph_node")
    return name if isinstance(name, str) else default


def _write(output: Any, state_key: str | None, signal: dict[str, Any]) -> Any:
    """Add the signal to a node's update; other outputs pass through unchanged."""
    if state_key is None:
        return output
    if output is None:
        return {state_key: [signal]}
    if isinstance(output, Mapping):
        return {**output, state_key: [signal]}
    if isinstance(output, Command) and (
        output.update is None or isinstance(output.update, Mapping)
    ):
        update = {**(output.update or {}), state_key: [signal]}
        return dataclasses.replace(output, update=update)
    return output


def controlled_node(
    node: Callable[..., Any],
    *,
    key: str | None = None,
    state_key: str | None = "closedloop",
    sleep: Callable[[float], Any] | None = None,
    context_param: str | None = "control",
    **options: Unpack[ControlOptions],
) -> Callable[..., Any]:
    """Wrap a LangGraph node function (sync or async) with the controller.

    The metric sees the node's return value (its state update); ``key_fields`` are dotted
    paths into it. ``key`` defaults to the node's name in the graph. The node keeps its
    signature, so LangGraph still injects ``config``, ``runtime`` and the rest; if it
    declares ``context_param`` it also gets the :class:`ControlContext` of each attempt.
    ``state_key=None`` writes nothing to the state. Other options as in ``@controlled``.
    """
    if not callable(node) or isinstance(node, Runnable):
        raise ConfigurationError(
            "node", node, "must be a node function (wrap runnables in ControlledRunnable)"
        )
    if state_key is not None and (not isinstance(state_key, str) or not state_key):
        raise ConfigurationError("state_key", state_key, "must be a non-empty str or None")
    if key is not None and not isinstance(key, str):
        raise ConfigurationError("key", key, "must be a str (the node name by default)")
    plan = build_plan(options, caller="controlled_node")
    fallback = getattr(node, "__name__", None) or type(node).__name__
    inject = accepts(node, context_param)

    def prepare(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[str, Invocation]:
        return key or _node_name(fallback), Invocation(args, kwargs)

    def attempt_kwargs(kwargs: dict[str, Any], ctx: ControlContext) -> dict[str, Any]:
        return {**kwargs, cast(str, context_param): ctx} if inject else kwargs

    wrapper = attempt_wrapper(
        node,
        plan=plan,
        sleep=sleep,
        prepare=prepare,
        call_kwargs=attempt_kwargs,
        finish=lambda name, outcome: _write(
            outcome.result, state_key, signal_record(name, outcome.records)
        ),
    )
    cast(Any, wrapper).controller = plan.loop
    return wrapper


class ControlledRunnable(Runnable[Any, Any]):
    """A LangChain/LangGraph runnable under the controller; usable as a graph node.

    Each ``invoke``/``ainvoke`` is one controlled call of the inner runnable: its output is
    sensed, the PID of ``key`` updated and failed attempts retried after the scheduled
    delay (``sleep`` for ``invoke``, ``async_sleep`` for ``ainvoke``). The attempt's
    :class:`ControlContext` travels to the inner runnable in
    ``config["configurable"][context_key]``. A mapping output also gets the signal record
    under ``state_key`` (a list of one, for an add reducer); ``state_key=None`` leaves
    outputs untouched.
    """

    def __init__(
        self,
        runnable: Runnable[Any, Any],
        *,
        key: str | None = None,
        state_key: str | None = "closedloop",
        context_key: str = "closedloop",
        sleep: Callable[[float], Any] | None = None,
        async_sleep: Callable[[float], Any] | None = None,
        **options: Unpack[ControlOptions],
    ) -> None:
        if not isinstance(runnable, Runnable):
            raise ConfigurationError("runnable", runnable, "must be a langchain Runnable")
        if state_key is not None and (not isinstance(state_key, str) or not state_key):
            raise ConfigurationError("state_key", state_key, "must be a non-empty str or None")
        for name, fn in (("sleep", sleep), ("async_sleep", async_sleep)):
            if fn is not None and not callable(fn):
                raise ConfigurationError(name, fn, "must be callable with seconds")
        self.runnable = runnable
        self.plan: RetryPlan = build_plan(options, caller="ControlledRunnable")
        self.key = key if key is not None else runnable.get_name()
        self.state_key = state_key
        self.context_key = context_key
        self._sleep = sleep if sleep is not None else time.sleep
        self._async_sleep = awaitable_sleep(async_sleep)
        self.name = f"Controlled{runnable.get_name()}"

    @property
    def controller(self) -> ControlLoop:
        """The :class:`ControlLoop` whose history records every attempt."""
        return self.plan.loop

    def _config(self, config: RunnableConfig | None, ctx: ControlContext) -> RunnableConfig:
        base: dict[str, Any] = dict(config or {})
        configurable = {**(base.get("configurable") or {}), self.context_key: ctx}
        return cast(RunnableConfig, {**base, "configurable": configurable})

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        """One controlled call of the inner runnable."""
        outcome: Attempts[Any] = run_sync(
            self.plan,
            self.key,
            Invocation((input,), kwargs),
            lambda ctx: self.runnable.invoke(input, self._config(config, ctx), **kwargs),
            self._sleep,
        )
        return _write(outcome.result, self.state_key, signal_record(self.key, outcome.records))

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        """One controlled call of the inner runnable, awaited."""
        outcome: Attempts[Any] = await run_async(
            self.plan,
            self.key,
            Invocation((input,), kwargs),
            lambda ctx: self.runnable.ainvoke(input, self._config(config, ctx), **kwargs),
            self._async_sleep,
        )
        return _write(outcome.result, self.state_key, signal_record(self.key, outcome.records))
