"""The loops the overhead benchmark compares, each on the same task.

``steps`` calls of one in-memory tool, then a final answer, proposed by a zero-latency
deterministic model (each answer a prebuilt ``Completion``): a plain while loop, a LangGraph
``StateGraph`` without a checkpointer and with its own SQLite one (``AsyncSqliteSaver``, a
checkpoint committed per node, as LangGraph's durable execution does), LangGraph's prebuilt
ReAct agent (``create_react_agent``: a LangChain chat model, ``ToolNode``, message objects),
and closedloop's ``Agent`` on a given store, with the tool read-only or a ``once`` effect.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any, TypedDict

from closedloop import Runtime
from closedloop.agent import Agent, JsonlTrace, RunLimits, Task
from closedloop.execution import AtomicAction, EffectClass
from closedloop.feedback import StateStore
from closedloop.models import DEFAULT_REQUEST, Completion, MessagesInput, ModelRequest, Usage

__all__ = [
    "CommitCounter",
    "ZeroLatencyModel",
    "closedloop_run",
    "floor_run",
    "langgraph_react_run",
    "langgraph_run",
    "plain_run",
    "work",
]


async def work(n: int) -> dict[str, int]:
    """The in-memory tool: doubles ``n``."""
    return {"n": n, "double": 2 * n}


class ZeroLatencyModel:
    """Answers ``{"tool": "work", "arguments": {"n": k}}`` for k = 0..steps-1, then a final
    answer; each reply a prebuilt ``Completion`` (no parsing, no tokenising)."""

    def __init__(self, steps: int) -> None:
        self.steps = steps
        texts = [json.dumps({"tool": "work", "arguments": {"n": k}}) for k in range(steps)]
        texts.append(json.dumps({"final": "done", "fields": {"total": steps}}))
        usage = Usage(prompt_tokens=100, completion_tokens=10)
        self._replies = [
            Completion(text=t, usage=usage, model="zero", call_id=f"c{i}")
            for i, t in enumerate(texts)
        ]
        self._next = 0

    @property
    def name(self) -> str:
        return "zero-latency"

    def reset(self) -> None:
        self._next = 0

    async def complete(
        self, messages: MessagesInput, request: ModelRequest = DEFAULT_REQUEST
    ) -> Completion:
        reply = self._replies[min(self._next, len(self._replies) - 1)]
        self._next += 1
        return reply


# --- the loops ----------------------------------------------------------------------------


async def floor_run(model: ZeroLatencyModel, steps: int) -> None:
    """The model and tool calls alone: what every loop must pay anyway."""
    for k in range(steps):
        await model.complete("x")
        await work(k)
    await model.complete("x")


async def plain_run(model: ZeroLatencyModel, steps: int) -> None:
    """A plain while loop: history as messages, ``json.loads``, call, append."""
    messages: list[dict[str, str]] = [{"role": "user", "content": "task"}]
    for _ in range(steps + 1):
        completion = await model.complete(messages)
        action = json.loads(completion.text)
        if "final" in action:
            return
        result = await work(**action["arguments"])
        messages.append({"role": "assistant", "content": completion.text})
        messages.append({"role": "user", "content": json.dumps(result)})


class _GraphState(TypedDict, total=False):
    messages: Annotated[list[dict[str, str]], operator.add]
    call: dict[str, Any] | None
    answer: str | None


class CommitCounter:
    """Counts the commits LangGraph's SQLite checkpointer makes on its connection."""

    def __init__(self) -> None:
        self.commits = 0
        self.saver: Any = None
        self.synchronous: int | None = None

    async def open(self, path: Path) -> Any:
        """An ``AsyncSqliteSaver`` on a new file at ``path``, its commits counted."""
        import aiosqlite
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        conn = await aiosqlite.connect(str(path))
        commit = conn.commit

        async def counted() -> None:
            self.commits += 1
            await commit()

        conn.commit = counted  # type: ignore[method-assign]
        self.saver = AsyncSqliteSaver(conn)
        await self.saver.setup()
        async with conn.execute("PRAGMA synchronous") as cursor:
            row = await cursor.fetchone()
        self.synchronous = None if row is None else int(row[0])
        return self.saver

    async def close(self) -> None:
        if self.saver is not None:
            await self.saver.conn.close()


def langgraph_run(
    model: ZeroLatencyModel, steps: int, checkpointer: Any = None
) -> Callable[[], Awaitable[Any]]:
    """A LangGraph ``StateGraph`` doing the same steps (compiled once, invoked per round);
    with ``checkpointer`` every round is a new thread, checkpointed after each node."""
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import RetryPolicy

    async def agent(state: _GraphState) -> dict[str, Any]:
        completion = await model.complete(state.get("messages", []))
        action = json.loads(completion.text)
        if "final" in action:
            return {"answer": action["final"], "call": None}
        return {
            "messages": [{"role": "assistant", "content": completion.text}],
            "call": action,
        }

    async def tools(state: _GraphState) -> dict[str, Any]:
        call = state.get("call") or {}
        result = await work(**call["arguments"])
        return {"messages": [{"role": "user", "content": json.dumps(result)}], "call": None}

    def route(state: _GraphState) -> str:
        return "tools" if state.get("call") else END

    policy = RetryPolicy(max_attempts=3)
    graph = StateGraph(_GraphState)
    graph.add_node("agent", agent, retry_policy=policy)
    graph.add_node("tools", tools, retry_policy=policy)
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", route, ["tools", END])
    graph.add_edge("tools", "agent")
    compiled = graph.compile(checkpointer=checkpointer)
    runs = {"n": 0}

    async def run() -> Any:
        runs["n"] += 1
        config: Any = {"recursion_limit": 2 * steps + 5}
        if checkpointer is not None:
            config["configurable"] = {"thread_id": f"run-{runs['n']}"}
        return await compiled.ainvoke(
            {"messages": [{"role": "user", "content": "task"}]}, config=config
        )

    return run


def closedloop_run(
    model: ZeroLatencyModel,
    steps: int,
    store: StateStore,
    trace_dir: Path | None,
    effect: EffectClass = EffectClass.ONCE,
) -> Callable[[], Awaitable[Any]]:
    """closedloop's ``Agent`` on the same steps: with a ``once`` effect (the default) every
    step also claims and commits a ledger record, with a read-only one (``recomputable``)
    it does not; ``trace_dir`` adds the JSONL trace."""
    action = AtomicAction(name="work", fn=work, effect=effect)
    agent = Agent(
        model,
        [action],
        limits=RunLimits(max_steps=steps + 2),
        runtime=Runtime(store=store, trace=False),
    )
    runs = {"n": 0}

    async def run() -> Any:
        runs["n"] += 1
        trace: Any = False
        if trace_dir is not None:
            trace = JsonlTrace(trace_dir / f"run-{runs['n']}" / "trace.jsonl")
        result = await agent.run(Task(prompt="double the numbers"), trace=trace)
        if not result.success:
            raise AssertionError(f"the overhead task failed: {result.message}")
        return result

    return run


def langgraph_react_run(model: ZeroLatencyModel, steps: int) -> Callable[[], Awaitable[Any]]:
    """LangGraph's prebuilt ReAct agent on the same steps, no checkpointer: the zero-latency
    model answers through a LangChain chat model (its tool calls as ``AIMessage.tool_calls``)
    and ``ToolNode`` runs the tool, a LangChain tool, with message objects in the state."""
    import warnings

    from langchain_core.tools import StructuredTool
    from langgraph.prebuilt import create_react_agent

    tool = StructuredTool.from_function(coroutine=work, name="work", description="Doubles n.")
    with warnings.catch_warnings():
        # Deprecated since LangGraph 1.0, moved to langchain.agents.create_agent (langchain
        # is not installed here); still the agent LangGraph itself ships.
        warnings.simplefilter("ignore", DeprecationWarning)
        agent = create_react_agent(_chat_model(model), [tool])
    config: Any = {"recursion_limit": 2 * steps + 5}

    async def run() -> Any:
        return await agent.ainvoke({"messages": [("user", "task")]}, config=config)

    return run


def _chat_model(model: ZeroLatencyModel) -> Any:
    """``model`` as a LangChain chat model: each reply's JSON action becomes a tool call."""
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.outputs import ChatGeneration, ChatResult

    class ZeroLatencyChat(BaseChatModel):
        @property
        def _llm_type(self) -> str:
            return "zero-latency"

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self  # the replies are fixed: nothing to bind

        def _generate(
            self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any
        ) -> ChatResult:
            raise NotImplementedError("the overhead loops are async")

        async def _agenerate(
            self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any
        ) -> ChatResult:
            completion = await model.complete("x")
            action = json.loads(completion.text)
            if "final" in action:
                message = AIMessage(content=action["final"])
            else:
                call = {
                    "name": action["tool"],
                    "args": action["arguments"],
                    "id": completion.call_id,
                }
                message = AIMessage(content="", tool_calls=[call])
            return ChatResult(generations=[ChatGeneration(message=message)])

    return ZeroLatencyChat()
