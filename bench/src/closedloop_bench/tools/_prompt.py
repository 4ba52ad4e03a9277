"""The one prompt every strategy sends, the reply parser, and the strict response schema.

A comparison of strategies changes one thing at a time, so every strategy builds its
messages with :func:`build_messages`: the same system prompt (the offered functions as
JSON schemas and the two answer forms) followed by the task's own messages. An agent gets
the same rules as its instructions (:func:`agent_instructions`) and lists the functions
itself, once. The answer is
one JSON object, ``{"calls": [{"name": ..., "arguments": {...}}, ...]}`` or
``{"no_call": "<short reason>"}``.

:func:`strict_schema` is the grammar of that answer: one alternative per offered function
with its own argument schema (enums, required fields, types), and a no-call branch. Every
free string in it is bounded (``maxLength``) and every list too (``maxItems``), so a
constrained decoder can never run on until ``max_tokens``.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from closedloop.models import Message, extract_json

from ._format import ToolTask
from ._score import Call

__all__ = [
    "MAX_CALLS",
    "STRING_LIMIT",
    "ParsedReply",
    "agent_instructions",
    "build_messages",
    "parse_reply",
    "reply_from_value",
    "strict_schema",
    "system_prompt",
    "task_request",
]

STRING_LIMIT = 80
"""The longest free string the strict grammar allows (an argument or the no-call reason)."""

MAX_CALLS = 6
"""The most calls one answer may make under the strict grammar."""

_HEAD = """\
You are a function-calling assistant. These are the functions you can call:

{functions}"""

_FORMS = """\
Answer with exactly one JSON object and nothing else, in one of two forms:
{"calls": [{"name": "<function name>", "arguments": {<argument>: <value>, ...}}]}
  with every call the request needs, in the order they must run; or
{"no_call": "<short reason>"}
  only when none of the functions can do what the user asks."""

_STEP_FORMS = """\
Make every call the request needs, one call per reply, in the order they must run, then
give the final answer. When none of the functions can do what the user asks, make no call
and give a final answer with a short reason."""

_TAIL = "Use only the functions and the arguments listed above, with values taken from the request."


def _listing(task: ToolTask) -> str:
    functions = [
        {"name": f.name, "description": f.description, "parameters": f.parameters}
        for f in task.functions.values()
    ]
    return "\n".join(json.dumps(f, ensure_ascii=False) for f in functions)


def system_prompt(task: ToolTask) -> str:
    """The system prompt for ``task``: its functions and the answer forms."""
    return f"{_HEAD.format(functions=_listing(task))}\n\n{_FORMS}\n{_TAIL}"


_AGENT_HEAD = """\
You are a function-calling assistant. The functions you can call are the tools listed \
below, each with its arguments' JSON schema."""

_AGENT_TAIL = (
    "Use only the tools and the arguments listed below, with values taken from the request."
)


def agent_instructions(task: ToolTask) -> str:
    """The shared prompt as an agent's instructions: the same rules, with the one-answer
    forms replaced by the step-by-step ones (an agent makes one call a reply and answers
    in its own reply format), and without the listing of the functions: the agent lists
    its tools itself (name, description, arguments schema), so listing them here too would
    send every function twice."""
    del task  # the same words for every task: its functions come in the agent's listing
    return f"{_AGENT_HEAD}\n\n{_STEP_FORMS}\n{_AGENT_TAIL}"


def task_request(task: ToolTask) -> str:
    """The task's own messages as one prompt: the user's words as they are; earlier turns
    of a conversation each on a line headed by their role."""
    if len(task.messages) == 1:
        return task.messages[0].content
    return "\n".join(f"{m.role}: {m.content}" for m in task.messages)


def build_messages(task: ToolTask) -> list[Message]:
    """The messages every strategy sends for ``task``."""
    return [
        Message(role="system", content=system_prompt(task)),
        *(Message(role=m.role, content=m.content) for m in task.messages),
    ]


_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions")
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SCHEMA_ONE = ("items", "additionalProperties", "not", "contains")


def _bounded(schema: Any) -> Any:
    """A copy of a JSON Schema with every free string and list given an upper bound."""
    if not isinstance(schema, Mapping):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _SCHEMA_MAPS and isinstance(value, Mapping):
            out[key] = {name: _bounded(sub) for name, sub in value.items()}
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            out[key] = [_bounded(sub) for sub in value]
        elif key in _SCHEMA_ONE:
            out[key] = _bounded(value)
        else:
            out[key] = copy.deepcopy(value)
    kind = out.get("type")
    if kind == "string" and "enum" not in out and "const" not in out:
        out["maxLength"] = min(int(out.get("maxLength", STRING_LIMIT)), STRING_LIMIT)
    elif kind == "array":
        out["maxItems"] = min(int(out.get("maxItems", MAX_CALLS)), MAX_CALLS)
    elif kind == "object":
        out.setdefault("additionalProperties", False)
    return out


def strict_schema(task: ToolTask) -> dict[str, Any]:
    """The response schema of the strict strategy for ``task`` (see the module docstring)."""
    alternatives = [
        {
            "type": "object",
            "properties": {
                "name": {"const": f.name},
                "arguments": _bounded(f.parameters),
            },
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }
        for f in task.functions.values()
    ]
    item: dict[str, Any] = alternatives[0] if len(alternatives) == 1 else {"anyOf": alternatives}
    return {
        "anyOf": [
            {
                "type": "object",
                "properties": {
                    "calls": {"type": "array", "items": item, "minItems": 1, "maxItems": MAX_CALLS}
                },
                "required": ["calls"],
                "additionalProperties": False,
            },
            {
                "type": "object",
                "properties": {"no_call": {"type": "string", "maxLength": STRING_LIMIT}},
                "required": ["no_call"],
                "additionalProperties": False,
            },
        ]
    }


@dataclass(frozen=True, slots=True)
class ParsedReply:
    """The calls read from a reply, the words it gave (a no-call reason), or why not."""

    calls: tuple[Call, ...] = ()
    text: str = ""
    error: str | None = None


def _one_call(item: Any) -> Call | None:
    if not isinstance(item, Mapping):
        return None
    name = item.get("name")
    if not isinstance(name, str) or not name:
        return None
    args = item.get("arguments", {})
    if isinstance(args, str):
        # Some models write the arguments as JSON text, the way native tool calls carry them.
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            return None
    if not isinstance(args, Mapping):
        return None
    return Call(name, dict(args))


def reply_from_value(value: Any) -> ParsedReply:
    """Read a decoded reply: ``{"calls": [...]}``, ``{"no_call": ...}``, a bare call object
    or a list of calls."""
    if isinstance(value, Mapping) and "no_call" in value and not value.get("calls"):
        return ParsedReply(text=str(value["no_call"]))
    if isinstance(value, Mapping) and "calls" in value:
        items = value["calls"]
    elif isinstance(value, Mapping) and "name" in value:
        items = [value]
    else:
        items = value
    if not isinstance(items, list):
        return ParsedReply(error="the reply is neither a list of calls nor a no-call answer")
    calls = [_one_call(item) for item in items]
    if any(c is None for c in calls):
        return ParsedReply(error="a call lacks a name or has arguments that are not an object")
    return ParsedReply(calls=tuple(c for c in calls if c is not None))


def parse_reply(text: str) -> ParsedReply:
    """Read a reply leniently: the JSON is dug out of prose or code fences first."""
    candidate = extract_json(text)
    try:
        value = json.loads(candidate)
    except (json.JSONDecodeError, RecursionError):
        return ParsedReply(text=text.strip(), error="no JSON answer in the reply")
    return reply_from_value(value)
