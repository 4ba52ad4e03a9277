"""What the model may answer, and reading what it did answer.

Models that call tools natively get the tools as OpenAI function entries plus a
``final_answer`` function. Every other model answers with one JSON object: a tool call
``{"tool": <one of the names>, "arguments": {...}}`` or a final answer ``{"final": "...",
"fields": {...}}`` (plan modes: ``{"plan": [...]}``). The schema of that object is built
from the tool list; at the strict actuator level it goes to the model as
``response_schema``, so a local model decodes under a grammar and cannot leave it.

The strict schema is tight: one alternative per tool (``oneOf``, the tool's name as a
``const`` beside its own argument schema, closed to extra keys), every free string and
every array bounded (:func:`bound_schema`), so a reply under the grammar always ends
before ``max_tokens``; and the answer branch only where the caller opens it, so a model
that cannot make the call cannot leave the task through a final answer either.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ..models import Completion
from ..perception import sanitize_json
from ._records import ActionCall
from ._state import RequiredField
from ._tools import Tool

__all__ = [
    "DEFAULT_MAX_ANSWER_CHARS",
    "DEFAULT_MAX_ITEMS",
    "DEFAULT_MAX_STRING_CHARS",
    "FINAL_TOOL",
    "Proposal",
    "action_schema",
    "bound_schema",
    "final_tool_schema",
    "inline_refs",
    "parse_proposal",
    "plan_schema",
]

FINAL_TOOL = "final_answer"
DEFAULT_MAX_ANSWER_CHARS = 200
"""The longest final answer the strict grammar lets a model write."""
DEFAULT_MAX_STRING_CHARS = 200
"""The longest string argument the strict grammar allows where a tool's schema sets none."""
DEFAULT_MAX_ITEMS = 16
"""The longest array the strict grammar allows where a tool's schema sets none."""
Kind = Literal["tool", "final", "plan", "invalid"]


@dataclass(frozen=True, slots=True)
class Proposal:
    """The model's proposal for this step, before validation."""

    kind: Kind
    call: ActionCall | None = None
    answer: str | None = None
    fields: Mapping[str, Any] = field(default_factory=dict)
    plan: tuple[Mapping[str, Any], ...] = ()
    errors: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


def inline_refs(schema: Mapping[str, Any], max_depth: int = 8) -> dict[str, Any]:
    """``schema`` with local ``#/$defs/...`` references replaced by their definitions.

    Schemas are embedded inside a larger action schema, where their ``$defs`` would no
    longer resolve. A recursive type is cut at ``max_depth`` to a plain object.
    """
    defs = dict(schema.get("$defs", {}) or {})
    defs.update(schema.get("definitions", {}) or {})

    def walk(node: Any, depth: int) -> Any:
        if isinstance(node, list):
            return [walk(n, depth) for n in node]
        if not isinstance(node, Mapping):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(("#/$defs/", "#/definitions/")):
            target = defs.get(ref.rsplit("/", 1)[-1])
            if target is None or depth >= max_depth:
                return {"type": "object"}
            merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
            return walk(merged, depth + 1)
        return {k: walk(v, depth) for k, v in node.items() if k not in ("$defs", "definitions")}

    out: dict[str, Any] = walk(copy.deepcopy(dict(schema)), 0)
    return out


def _is(node: Mapping[str, Any], kind: str) -> bool:
    t = node.get("type")
    return t == kind or (isinstance(t, list) and kind in t)


def bound_schema(
    schema: Mapping[str, Any],
    *,
    max_string_chars: int = DEFAULT_MAX_STRING_CHARS,
    max_items: int = DEFAULT_MAX_ITEMS,
) -> dict[str, Any]:
    """``schema`` with every free string given a ``maxLength``, every array a ``maxItems``
    and every object with listed properties closed to extra keys, where it sets none.

    A grammar made from it cannot run on forever: the strings a tool or an answer may
    hold end, and no key outside the schema can be invented. Enums, constants and patterns
    are already bounded by what they list and stay as they are.
    """

    def walk(node: Any) -> Any:
        if isinstance(node, list):
            return [walk(n) for n in node]
        if not isinstance(node, Mapping):
            return node
        out = {k: walk(v) for k, v in node.items()}
        for key in ("properties", "patternProperties", "$defs", "definitions"):
            if isinstance(node.get(key), Mapping):
                out[key] = {name: walk(sub) for name, sub in node[key].items()}
        free = not any(k in node for k in ("enum", "const", "pattern", "format"))
        if _is(node, "string") and free and "maxLength" not in node:
            out["maxLength"] = max_string_chars
        if _is(node, "array") and "maxItems" not in node:
            out["maxItems"] = max(max_items, int(node.get("minItems", 0) or 0))
        if (
            _is(node, "object")
            and isinstance(node.get("properties"), Mapping)
            and "additionalProperties" not in node
        ):
            out["additionalProperties"] = False
        return out

    result: dict[str, Any] = walk(dict(schema))
    return result


def _fields_schema(required: Sequence[RequiredField]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {f.name: dict(f.schema) if f.schema else {} for f in required},
        "required": [f.name for f in required],
    }


def _final_variant(
    required: Sequence[RequiredField], max_answer_chars: int | None = None
) -> dict[str, Any]:
    answer: dict[str, Any] = {"type": "string"}
    if max_answer_chars is not None:
        answer["maxLength"] = max_answer_chars
    properties: dict[str, Any] = {"final": answer}
    names = ["final"]
    if required:
        fields = _fields_schema(required)
        properties["fields"] = (
            fields
            if max_answer_chars is None
            else bound_schema(fields, max_string_chars=max_answer_chars)
        )
        names.append("fields")
    return {
        "type": "object",
        "properties": properties,
        "required": names,
        "additionalProperties": False,
    }


def action_schema(
    tools: Sequence[Tool],
    required: Sequence[RequiredField] = (),
    *,
    strict: bool = False,
    allow_tool: bool = True,
    allow_final: bool = True,
    max_answer_chars: int = DEFAULT_MAX_ANSWER_CHARS,
    max_string_chars: int = DEFAULT_MAX_STRING_CHARS,
) -> dict[str, Any]:
    """The JSON schema of one step's answer.

    Loose: ``tool`` is an enum of the names and ``arguments`` any object (the validator
    checks them against the tool's own schema). Strict: one alternative per tool with its
    full argument schema (``oneOf``), so constrained decoding enforces enums, required
    keys, types and ranges too; every free string is bounded (a final answer by
    ``max_answer_chars``, a string argument whose schema sets no bound by
    ``max_string_chars``). ``allow_final=False`` leaves the answer branch out (while there
    is a tool to call): the caller opens it once the task's completion predicate can hold.
    """
    variants: list[dict[str, Any]] = []
    if allow_tool and tools:
        if strict:
            for t in tools:
                arguments = bound_schema(
                    inline_refs(t.parameters), max_string_chars=max_string_chars
                )
                arguments.setdefault("type", "object")
                variants.append(
                    {
                        "type": "object",
                        "properties": {"tool": {"const": t.name}, "arguments": arguments},
                        "required": ["tool", "arguments"],
                        "additionalProperties": False,
                    }
                )
        else:
            variants.append(
                {
                    "type": "object",
                    "properties": {
                        "tool": {"type": "string", "enum": [t.name for t in tools]},
                        "arguments": {"type": "object"},
                    },
                    "required": ["tool", "arguments"],
                    "additionalProperties": False,
                }
            )
    if allow_final or not variants:
        variants.append(_final_variant(required, max_answer_chars if strict else None))
    if len(variants) == 1:
        return variants[0]
    return {"oneOf": variants} if strict else {"anyOf": variants}


def plan_schema(tools: Sequence[Tool], max_steps: int) -> dict[str, Any]:
    """The schema of a structured plan: an ordered list of tool calls with goals."""
    return {
        "type": "object",
        "properties": {
            "plan": {
                "type": "array",
                "minItems": 1,
                "maxItems": max_steps,
                "items": {
                    "type": "object",
                    "properties": {
                        "tool": {"type": "string", "enum": [t.name for t in tools]},
                        "arguments": {"type": "object"},
                        "goal": {"type": "string"},
                        "core": {"type": "boolean"},
                    },
                    "required": ["tool", "arguments"],
                },
            }
        },
        "required": ["plan"],
        "additionalProperties": False,
    }


def final_tool_schema(required: Sequence[RequiredField]) -> dict[str, Any]:
    """The ``final_answer`` function offered to models with native tool calling."""
    properties: dict[str, Any] = {"answer": {"type": "string"}}
    names = ["answer"]
    if required:
        properties["fields"] = _fields_schema(required)
        names.append("fields")
    return {
        "type": "function",
        "function": {
            "name": FINAL_TOOL,
            "description": "Give the final answer (and the required fields) when the task is done.",
            "parameters": {"type": "object", "properties": properties, "required": names},
        },
    }


def _from_mapping(data: Mapping[str, Any]) -> Proposal:
    if "tool" in data and isinstance(data["tool"], str):
        arguments = data.get("arguments")
        notes: tuple[str, ...] = ()
        if arguments is None:
            # Small models often flatten the call; the rest of the object is the arguments.
            arguments = {k: v for k, v in data.items() if k != "tool"}
            if arguments:
                notes = ("the arguments were read from the top level of the reply",)
        if not isinstance(arguments, Mapping):
            return Proposal(
                "invalid", errors=(f"'arguments' must be a JSON object, got {arguments!r}",)
            )
        return Proposal(
            "tool", call=ActionCall(tool=data["tool"], arguments=dict(arguments)), notes=notes
        )
    if "plan" in data:
        plan = data["plan"]
        if not isinstance(plan, list) or not all(isinstance(s, Mapping) for s in plan):
            return Proposal("invalid", errors=("'plan' must be a list of step objects",))
        return Proposal("plan", plan=tuple(plan))
    for key in ("final", "answer", "final_answer"):
        if key in data:
            answer = data[key]
            fields = data.get("fields") or {}
            if isinstance(answer, Mapping):
                fields = answer.get("fields", fields)
                answer = answer.get("answer", json.dumps(answer, ensure_ascii=False))
            if not isinstance(fields, Mapping):
                return Proposal("invalid", errors=("'fields' must be a JSON object",))
            return Proposal("final", answer=str(answer), fields=dict(fields))
    return Proposal(
        "invalid",
        errors=(
            'the reply is neither a tool call {"tool": ..., "arguments": {...}} nor a final '
            f'answer {{"final": ...}}; keys were {sorted(data)}',
        ),
    )


def parse_proposal(completion: Completion, *, native: bool) -> Proposal:
    """Read the model's answer as a tool call, a final answer, a plan, or an invalid reply."""
    if completion.tool_calls:
        call = completion.tool_calls[0]
        notes: tuple[str, ...] = ()
        if len(completion.tool_calls) > 1:
            notes = (
                f"one action per step: {len(completion.tool_calls) - 1} further calls ignored",
            )
        try:
            arguments = json.loads(call.arguments) if call.arguments.strip() else {}
        except json.JSONDecodeError as exc:
            return Proposal(
                "invalid", errors=(f"arguments of {call.name!r} are not valid JSON: {exc}",)
            )
        if not isinstance(arguments, dict):
            return Proposal("invalid", errors=(f"arguments of {call.name!r} must be an object",))
        if call.name == FINAL_TOOL:
            fields = arguments.get("fields") or {}
            return Proposal(
                "final",
                answer=str(arguments.get("answer", "")),
                fields=fields if isinstance(fields, dict) else {},
                notes=notes,
            )
        return Proposal("tool", call=ActionCall(tool=call.name, arguments=arguments), notes=notes)
    data: Any = completion.parsed
    errors: list[str] = []
    if data is None:
        result = sanitize_json(completion.text)
        data = result.data if result.ok else None
        errors.extend(result.errors[:3])
    if isinstance(data, Mapping):
        return _from_mapping(data)
    if native and completion.text.strip():
        return Proposal("final", answer=completion.text.strip())
    if completion.finish_reason == "length":
        errors.insert(0, "the reply was cut off at max_tokens before the JSON was complete")
    head = completion.text.strip()[:160]
    return Proposal(
        "invalid",
        errors=(f"the reply is not a JSON action (it began {head!r})", *errors),
    )
