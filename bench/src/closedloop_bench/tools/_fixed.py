"""Fixed settings of the loop's knobs, each on the one shared prompt: the frontier's points.

- ``reask@N``: the open-loop call, then up to ``N`` re-asks while the answer fails the
  validator, each with the validator's error text (no controller decides when or how);
- ``votes@k``: ``k`` samples of the answer at a raised temperature and a majority vote on
  the normalised calls (self-consistency, Wang et al. 2023); samples that fail the
  validator do not vote unless all fail;
- ``svotes@k``: ``k`` samples of the ``strict`` call (the first greedy, the rest at the
  vote temperature) and a majority vote on their calls: the vote a sample bank records,
  so a replay of the bank's votes can be checked live;
- ``strong``: the ``strict`` call on the strongest model of the run (the last of
  ``--models``, which are listed weakest first, as a ladder is).

The validator is the one the tools themselves apply: the answer must parse, each call must
name an offered function, and its arguments must satisfy that function's JSON Schema.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass

import jsonschema

from closedloop import ConfigurationError
from closedloop.models import Message, Model, ModelRequest

from ._format import ToolTask
from ._prompt import (
    ParsedReply,
    build_messages,
    parse_reply,
    reply_from_value,
    strict_schema,
)
from ._strategies import DEFAULT_MAX_TOKENS, Attempt, Strict, register_family, register_strategy

__all__ = ["VOTE_TEMPERATURE", "ReAsk", "StrictVotes", "Votes", "check_reply", "strong"]

VOTE_TEMPERATURE = 0.7
"""The sampling temperature of the votes: high enough that samples differ."""


def check_reply(task: ToolTask, reply: ParsedReply) -> str | None:
    """Why ``reply`` is not a valid answer to ``task`` (None: it is)."""
    if reply.error is not None:
        return reply.error
    functions = task.functions
    for call in reply.calls:
        function = functions.get(call.name)
        if function is None:
            return f"unknown function {call.name!r}; the functions are {', '.join(functions)}"
        validator = jsonschema.Draft202012Validator(function.parameters)
        error = next(iter(validator.iter_errors(dict(call.arguments))), None)
        if error is not None:
            return f"bad arguments for {call.name}: {error.message}"
    return None


_AGAIN = (
    "That answer is not valid: {error}. Answer the request again with exactly one JSON "
    "object in one of the two forms."
)


def _count(family: str, what: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError("strategy", f"{family}@{value}", f"{what} must be at least 1")
    return value


@dataclass(frozen=True, slots=True)
class ReAsk:
    """The open-loop call, re-asked up to ``n`` times with the validator's error text."""

    n: int = 2
    max_tokens: int = DEFAULT_MAX_TOKENS
    clock: Callable[[], float] = time.perf_counter
    fixed: bool = True

    def __post_init__(self) -> None:
        _count("reask", "the re-ask count N", self.n)

    @property
    def name(self) -> str:
        return f"reask@{self.n}"

    async def solve(self, task: ToolTask, model: Model) -> Attempt:
        started = self.clock()
        messages: list[Message] = build_messages(task)
        request = ModelRequest(max_tokens=self.max_tokens, temperature=0.0)
        reply, error, calls = ParsedReply(), None, 0
        for _ in range(self.n + 1):
            completion = await model.complete(messages, request)
            calls += 1
            reply = parse_reply(completion.text)
            error = check_reply(task, reply)
            if error is None:
                break
            messages = [
                *messages,
                Message(role="assistant", content=completion.text),
                Message(role="user", content=_AGAIN.format(error=error)),
            ]
        return Attempt(
            calls=reply.calls,
            final_text=reply.text,
            model_calls=calls,
            wall_s=max(0.0, self.clock() - started),
            error=error,
        )


def _key(reply: ParsedReply) -> str:
    # Calls compared as a set of normalised JSON objects: two samples that make the same
    # calls in another order agree (the representative keeps its own order).
    return json.dumps(
        sorted(json.dumps(c.as_dict(), sort_keys=True) for c in reply.calls)
        if reply.calls
        else "no call"
    )


@dataclass(frozen=True, slots=True)
class Votes:
    """``k`` samples of the answer and a majority vote on their calls."""

    k: int = 3
    temperature: float = VOTE_TEMPERATURE
    max_tokens: int = DEFAULT_MAX_TOKENS
    clock: Callable[[], float] = time.perf_counter
    fixed: bool = True

    def __post_init__(self) -> None:
        _count(self.name.partition("@")[0], "the vote count k", self.k)

    @property
    def name(self) -> str:
        return f"votes@{self.k}"

    async def solve(self, task: ToolTask, model: Model) -> Attempt:
        started = self.clock()
        messages = build_messages(task)
        replies: list[ParsedReply] = []
        for index in range(self.k):
            request = ModelRequest(
                max_tokens=self.max_tokens, temperature=self.temperature, seed=index
            )
            replies.append(parse_reply((await model.complete(messages, request)).text))
        valid = [r for r in replies if check_reply(task, r) is None]
        pool = valid or replies
        counts: dict[str, int] = {}
        for reply in pool:
            counts[_key(reply)] = counts.get(_key(reply), 0) + 1
        top = max(counts.values())
        # The first sample of the most voted answer: ties go to the earlier sample.
        chosen = next(r for r in pool if counts[_key(r)] == top)
        return Attempt(
            calls=chosen.calls,
            final_text=chosen.text,
            model_calls=self.k,
            wall_s=max(0.0, self.clock() - started),
            error=None if valid else chosen.error or check_reply(task, chosen),
            extra={"votes": top, "samples": self.k, "distinct": len(counts)},
        )


@dataclass(frozen=True, slots=True)
class StrictVotes(Votes):
    """``k`` samples of the constrained call, the first greedy, and a majority vote.

    A sample that does not parse votes for nothing; ties go to the earlier sample, so with
    no majority the greedy call stands (as the sample bank's replay decides). The settings
    are those of :class:`Votes`."""

    @property
    def name(self) -> str:
        return f"svotes@{self.k}"

    async def solve(self, task: ToolTask, model: Model) -> Attempt:
        started = self.clock()
        messages, schema = build_messages(task), strict_schema(task)
        replies: list[ParsedReply] = []
        tokens_in = tokens_out = 0
        for index in range(self.k):
            request = ModelRequest(
                max_tokens=self.max_tokens,
                temperature=0.0 if index == 0 else self.temperature,
                seed=index,
                response_schema=schema,
            )
            completion = await model.complete(messages, request)
            tokens_in += completion.usage.prompt_tokens
            tokens_out += completion.usage.completion_tokens
            parsed = completion.parsed
            replies.append(
                reply_from_value(parsed) if parsed is not None else parse_reply(completion.text)
            )
        keys = [None if r.error is not None else _key(r) for r in replies]
        counts: dict[str, int] = {}
        for key in keys:
            if key is not None:
                counts[key] = counts.get(key, 0) + 1
        chosen = replies[0]
        if counts:
            top = max(counts.values())
            chosen = next(
                r for r, key in zip(replies, keys, strict=True) if key and counts[key] == top
            )
        return Attempt(
            calls=chosen.calls,
            final_text=chosen.text,
            model_calls=self.k,
            tokens_in=tokens_in,
            tokens_out=tokens_out,
            wall_s=max(0.0, self.clock() - started),
            error=chosen.error,
            extra={"votes": max(counts.values(), default=0), "samples": self.k},
        )


def strong() -> Strict:
    """``strict`` on the strongest model of the run (see the module docstring)."""
    return Strict(name="strong", runs_on="strongest")


register_family("reask", ReAsk)
register_family("votes", Votes)
register_family("svotes", StrictVotes)
register_strategy("strong", strong)
