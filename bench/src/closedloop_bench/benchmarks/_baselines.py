"""The two plain loops: open loop, and the same loop with fixed retries (tenacity).

Both keep the whole history as chat messages (the usual first version: every
observation appended, nothing projected) and run a tool's exception as text the model
reads next, as a user's ``try/except`` around the call would.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    retry_if_result,
    stop_after_attempt,
    wait_exponential,
)

from closedloop._exceptions import (
    ActionError,
    LedgerError,
    ModelError,
    ModelResponseError,
    ToolError,
)
from closedloop.models import Model, ModelRequest
from closedloop.perception import Observation

from ..reference import DOMAIN_TOOLS, Answer
from ._strategies import (
    LABELS,
    Episode,
    Outcome,
    Reply,
    parse_reply,
    render_observation,
    retryable,
    system_prompt,
)

__all__ = ["FixedRetries", "OpenLoop", "ask_model", "call_tool", "initial_messages", "plain_tools"]

ToolFn = Callable[..., Awaitable[Any]]


def plain_tools(episode: Episode) -> dict[str, ToolFn]:
    """The domain's tool functions as a user calls them: bound methods, no contracts."""
    tools = episode.tools
    return {name: getattr(tools, name) for name in DOMAIN_TOOLS[episode.task.domain]}


async def call_tool(functions: dict[str, ToolFn], name: str, arguments: dict[str, Any]) -> Any:
    """Call one tool; a missing tool or bad arguments raise as they would in user code."""
    fn = functions.get(name)
    if fn is None:
        raise ToolError(f"unknown tool {name!r}; available: {', '.join(functions)}")
    try:
        return await fn(**arguments)
    except TypeError as exc:  # wrong argument names: what calling a Python function gives
        raise ToolError(f"{name}: {exc}") from exc


def initial_messages(episode: Episode) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": system_prompt(episode.task, episode.tools)},
        {"role": "user", "content": episode.task.prompt},
    ]


async def ask_model(
    model: Model, episode: Episode, messages: list[dict[str, str]]
) -> tuple[str, Reply]:
    limits = episode.limits
    completion = await model.complete(
        messages,
        ModelRequest(
            max_tokens=limits.max_tokens, temperature=limits.temperature, seed=limits.seed
        ),
    )
    reply = parse_reply(completion.text)
    if reply is None:
        raise ModelResponseError(f"not a JSON action: {completion.text[:120]!r}")
    return completion.text, reply


class OpenLoop:
    """A while loop: ask, parse, run, append. No validation beyond parsing, no retries."""

    name = "open_loop"
    label = LABELS["open_loop"]

    async def run(self, episode: Episode) -> Outcome:
        """One episode: stops at the first final answer, unreadable reply or the step cap."""
        functions = plain_tools(episode)
        messages = initial_messages(episode)
        limits = episode.limits
        for step in range(limits.max_steps):
            try:
                text, reply = await ask_model(episode.model, episode, messages)
            except ModelError as exc:
                return Outcome(answer=Answer(), halt="error", steps=step, error=str(exc))
            if reply.answer is not None:
                return Outcome(answer=reply.answer, halt="final", steps=step + 1)
            assert reply.tool is not None
            try:
                result: Any = await call_tool(functions, reply.tool, dict(reply.arguments))
            except Exception as exc:  # the user's try/except: the error text is the answer
                result = f"error: {type(exc).__name__}: {exc}"
            messages.append({"role": "assistant", "content": text})
            messages.append(
                {
                    "role": "user",
                    "content": "Observation: "
                    + render_observation(result, limits.observation_chars),
                }
            )
        return Outcome(answer=Answer(), halt="step_limit", steps=limits.max_steps)


def _failed_call(result: Any) -> bool:
    return isinstance(result, Observation) and retryable(result)


class FixedRetries:
    """The open loop with tenacity: every model and tool call gets 3 attempts and
    exponential backoff (``backoff_s``, then doubling) on exceptions and on the shared
    retry predicate (:func:`retryable`: HTTP failures, drifted and empty answers)."""

    name = "fixed_retries"
    label = LABELS["fixed_retries"]

    def _retrying(self, episode: Episode, retry: Any) -> AsyncRetrying:
        limits = episode.limits
        base = limits.backoff_s
        return AsyncRetrying(
            stop=stop_after_attempt(limits.attempts),
            wait=wait_exponential(multiplier=base, min=base, max=max(base, 8.0)),
            retry=retry,
            sleep=episode.sleep,
            reraise=True,
            retry_error_callback=_last_result,
        )

    async def run(self, episode: Episode) -> Outcome:
        """One episode; an exhausted retry ends it like an unhandled exception would."""
        functions = plain_tools(episode)
        messages = initial_messages(episode)
        limits = episode.limits
        model_retry = self._retrying(episode, retry_if_exception_type(ModelError))
        tool_retry = self._retrying(
            episode,
            retry_if_exception_type((ActionError, LedgerError)) | retry_if_result(_failed_call),
        )
        for step in range(limits.max_steps):
            try:
                asked: tuple[str, Reply] = await model_retry(
                    ask_model, episode.model, episode, messages
                )
            except ModelError as exc:
                return Outcome(answer=Answer(), halt="error", steps=step, error=str(exc))
            text, reply = asked
            if reply.answer is not None:
                return Outcome(answer=reply.answer, halt="final", steps=step + 1)
            assert reply.tool is not None
            try:
                result: Any = await tool_retry(
                    call_tool, functions, reply.tool, dict(reply.arguments)
                )
            except Exception as exc:
                result = f"error: {type(exc).__name__}: {exc}"
            messages.append({"role": "assistant", "content": text})
            messages.append(
                {
                    "role": "user",
                    "content": "Observation: "
                    + render_observation(result, limits.observation_chars),
                }
            )
        return Outcome(answer=Answer(), halt="step_limit", steps=limits.max_steps)


def _last_result(state: RetryCallState) -> Any:
    """After the last attempt: its result (a failed observation), or its exception raised."""
    outcome = state.outcome
    assert outcome is not None
    return outcome.result()
