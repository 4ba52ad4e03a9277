"""The oracle: the ideal answer to every task, built from its expected outcome alone.

It takes each rule's own value (``exact``, the first of ``one_of``, the ``number``, the
``text``) and leaves out an optional argument the user did not fix. A required argument
ruled ``any`` gets a value its schema accepts. Every generated task must be solved by its
oracle: a task the oracle fails has a checker that no answer can satisfy.
"""

from __future__ import annotations

import json
from typing import Any

from ._format import ArgRule, ToolTask
from ._score import Call

__all__ = ["ideal_reply", "oracle_calls"]

_PLACEHOLDER = {
    "string": "x",
    "integer": 1,
    "number": 1.0,
    "boolean": True,
    "array": [],
    "object": {},
}


def _value(rule: ArgRule, schema: dict[str, Any]) -> Any:
    kind = rule.kind
    if kind == "exact":
        return rule.exact
    if kind == "one_of":
        assert rule.one_of is not None
        return rule.one_of[0]
    if kind == "number":
        return rule.number
    if kind == "text":
        return rule.text
    if "enum" in schema:
        return schema["enum"][0]
    return _PLACEHOLDER.get(str(schema.get("type")), "x")


def oracle_calls(task: ToolTask) -> list[Call]:
    """The calls that solve ``task`` (none for a no-call task), in the expected order."""
    if task.expected.no_call:
        return []
    functions = task.functions
    calls: list[Call] = []
    for expected in task.expected.calls:
        properties = functions[expected.name].properties
        args = {
            name: _value(rule, properties.get(name, {}))
            for name, rule in expected.arguments.items()
            if not (rule.optional and rule.kind in ("any", "one_of"))
        }
        calls.append(Call(expected.name, args))
    return calls


def ideal_reply(task: ToolTask) -> str:
    """The oracle's answer as the reply text the shared prompt asks for."""
    calls = oracle_calls(task)
    if not calls:
        return json.dumps({"no_call": "none of the functions fits the request"})
    return json.dumps({"calls": [c.as_dict() for c in calls]}, ensure_ascii=False)
