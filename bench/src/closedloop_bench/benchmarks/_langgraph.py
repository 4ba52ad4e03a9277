"""The LangGraph baseline, built the way its users build a tool-calling agent.

A ``StateGraph`` with an ``agent`` node (ask the model, parse its action), a ``tools``
node (run the tool) and a conditional edge between them; both nodes carry
``RetryPolicy(max_attempts=3)`` and the run has a recursion limit. The tools node raises
on the shared retry predicate (HTTP-level failures, drifted and empty answers) so the
retry policy sees them (as ``response.raise_for_status()`` would); on its last attempt,
and for other tool errors, the failure comes back to the model as text, as LangGraph's
prebuilt ``ToolNode`` with ``handle_tool_errors`` returns it, so one failed call does not
end the run. Needs the ``langgraph`` extra.
"""

from __future__ import annotations

import json
import operator
from typing import Annotated, Any, TypedDict

from closedloop._exceptions import ActionError, LedgerError, ModelError

from ..reference import Answer
from ._baselines import ask_model, call_tool, initial_messages, plain_tools
from ._strategies import LABELS, Episode, Outcome, render_observation, retryable

__all__ = ["LangGraphAgent"]


class _State(TypedDict, total=False):
    messages: Annotated[list[dict[str, str]], operator.add]
    call: dict[str, Any] | None
    answer: dict[str, Any] | None
    steps: Annotated[int, operator.add]


class LangGraphAgent:
    """Agent node + tools node + conditional edge, ``RetryPolicy(max_attempts=3)``."""

    name = "langgraph"
    label = LABELS["langgraph"]

    def _graph(self, episode: Episode) -> Any:
        from langgraph.graph import END, START, StateGraph
        from langgraph.types import RetryPolicy

        functions = plain_tools(episode)
        limits = episode.limits

        async def agent(state: _State) -> dict[str, Any]:
            text, reply = await ask_model(episode.model, episode, list(state.get("messages", [])))
            if reply.answer is not None:
                return {"answer": reply.answer.model_dump(), "call": None, "steps": 1}
            call = {"tool": reply.tool, "arguments": dict(reply.arguments)}
            return {
                "messages": [{"role": "assistant", "content": text}],
                "call": call,
                "steps": 1,
            }

        attempts: dict[str, int] = {}

        async def tools(state: _State) -> dict[str, Any]:
            call = state.get("call") or {}
            # The node's retry policy calls it again with the same state: count its tries,
            # so the last one hands the failure to the model instead of ending the graph.
            key = json.dumps([state.get("steps"), call], sort_keys=True, default=str)
            attempts[key] = attempts.get(key, 0) + 1
            last = attempts[key] >= limits.attempts
            try:
                result: Any = await call_tool(
                    functions, str(call.get("tool")), dict(call.get("arguments") or {})
                )
            except (ActionError, LedgerError) as exc:
                if not last:
                    raise  # a failed HTTP call: the node's retry policy takes it
                result = f"error: {type(exc).__name__}: {exc}"
            except Exception as exc:
                result = f"error: {type(exc).__name__}: {exc}"
            if hasattr(result, "status") and retryable(result) and not last:
                raise ActionError(f"{call.get('tool')}: {result.meaning}")
            content = "Observation: " + render_observation(result, limits.observation_chars)
            return {"messages": [{"role": "user", "content": content}], "call": None}

        def route(state: _State) -> str:
            return "tools" if state.get("call") else END

        policy = RetryPolicy(
            max_attempts=limits.attempts,
            initial_interval=limits.backoff_s,
            backoff_factor=2.0,
            max_interval=max(limits.backoff_s, 8.0),
            jitter=False,  # reproducible latencies; LangGraph's default adds jitter
            retry_on=(ActionError, LedgerError, ModelError),
        )
        graph = StateGraph(_State)
        graph.add_node("agent", agent, retry_policy=policy)
        graph.add_node("tools", tools, retry_policy=policy)
        graph.add_edge(START, "agent")
        graph.add_conditional_edges("agent", route, ["tools", END])
        graph.add_edge("tools", "agent")
        return graph.compile()

    async def run(self, episode: Episode) -> Outcome:
        """One episode; running past the recursion limit is the step limit."""
        from langgraph.errors import GraphRecursionError

        graph = self._graph(episode)
        # An agent and a tools superstep per step: as many model calls as the plain loops.
        limit = 2 * episode.limits.max_steps
        try:
            state = await graph.ainvoke(
                {"messages": initial_messages(episode), "steps": 0},
                config={"recursion_limit": limit},
            )
        except GraphRecursionError:
            return Outcome(answer=Answer(), halt="step_limit", steps=episode.limits.max_steps)
        except Exception as exc:  # retries exhausted: the graph raises, as it does for users
            return Outcome(
                answer=Answer(), halt="error", steps=0, error=f"{type(exc).__name__}: {exc}"
            )
        steps = int(state.get("steps", 0))
        answer = state.get("answer")
        if answer is None:
            return Outcome(answer=Answer(), halt="step_limit", steps=steps)
        return Outcome(answer=Answer.model_validate(answer), halt="final", steps=steps)
