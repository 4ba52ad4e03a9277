"""The shared prompt, the reply parser and the strict grammar."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest

from closedloop.models import FunctionModel
from closedloop_bench.tools import (
    DATA_DIR,
    STRING_LIMIT,
    Call,
    OpenLoop,
    Strict,
    ToolTask,
    build_messages,
    ideal_reply,
    load_tool_tasks,
    parse_reply,
    strict_schema,
)

DEV = load_tool_tasks(DATA_DIR / "dev.jsonl")


def _strings(schema: Any) -> Iterator[dict[str, Any]]:
    if isinstance(schema, dict):
        if schema.get("type") == "string":
            yield schema
        for value in schema.values():
            yield from _strings(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from _strings(value)


def test_every_free_string_in_the_grammar_is_bounded() -> None:
    for task in DEV:
        for node in _strings(strict_schema(task)):
            if "enum" not in node and "const" not in node:
                assert 0 < node["maxLength"] <= STRING_LIMIT, (task.id, node)


def test_the_ideal_reply_fits_the_grammar_and_a_wrong_function_does_not() -> None:
    for task in DEV:
        validator = jsonschema.Draft202012Validator(strict_schema(task))
        assert validator.is_valid(json.loads(ideal_reply(task))), task.id
        assert validator.is_valid({"no_call": "nothing fits"})
        assert not validator.is_valid({"calls": [{"name": "no_such_fn", "arguments": {}}]})
        assert not validator.is_valid({"calls": []})
        assert not validator.is_valid({"no_call": "x" * (STRING_LIMIT + 1)})


def test_a_property_named_description_survives_the_bounding() -> None:
    task = DEV[0].model_copy(deep=True)
    raw = task.model_dump()
    raw["tools"][0]["function"]["parameters"] = {
        "type": "object",
        "properties": {"description": {"type": "string"}},
        "required": ["description"],
    }
    raw["expected"] = {"calls": [{"name": raw["tools"][0]["function"]["name"]}]}
    reshaped = ToolTask.model_validate(raw)
    schema = strict_schema(reshaped)
    args = schema["anyOf"][0]["properties"]["calls"]["items"]["properties"]["arguments"]
    assert args["properties"]["description"]["maxLength"] == STRING_LIMIT


@pytest.mark.parametrize(
    ("text", "calls", "error"),
    [
        ('{"calls": [{"name": "f", "arguments": {"a": 1}}]}', [Call("f", {"a": 1})], False),
        ('Sure:\n```json\n{"name": "f", "arguments": {}}\n```', [Call("f", {})], False),
        ('[{"name": "f", "arguments": "{\\"a\\": 2}"}]', [Call("f", {"a": 2})], False),
        ('{"no_call": "nothing fits"}', [], False),
        ("I would call f.", [], True),
        ('{"calls": [{"arguments": {}}]}', [], True),
    ],
)
def test_parse_reply(text: str, calls: list[Call], error: bool) -> None:
    reply = parse_reply(text)
    assert list(reply.calls) == calls
    assert (reply.error is not None) == error


async def test_both_strategies_send_the_same_prompt_and_strict_adds_only_the_grammar() -> None:
    task = next(t for t in DEV if t.family == "parallel")
    model = FunctionModel(lambda _m, _c: ideal_reply(task))
    open_attempt = await OpenLoop().solve(task, model)
    strict_attempt = await Strict().solve(task, model)
    first, second = model.calls
    assert first.messages == second.messages
    assert [m.content for m in first.messages][1:] == [m.content for m in task.messages]
    assert first.messages[0].content == build_messages(task)[0].content
    assert first.response_schema is None
    assert second.response_schema == strict_schema(task)
    assert first.max_tokens == second.max_tokens
    assert open_attempt.calls == strict_attempt.calls and len(open_attempt.calls) >= 2
    assert strict_attempt.model_calls == 1 and strict_attempt.tokens_in > 0


async def test_strict_reports_an_off_grammar_reply() -> None:
    task = DEV[0]
    attempt = await Strict().solve(task, FunctionModel(lambda _m, _c: "no JSON here"))
    assert attempt.calls == () and attempt.error is not None


def test_the_prompt_lists_every_offered_function() -> None:
    for task in DEV:
        system = build_messages(task)[0].content
        assert all(f'"name": "{name}"' in system for name in task.functions)
        assert '"no_call"' in system


def test_the_strict_schema_compiles_to_a_llama_cpp_grammar() -> None:
    gbnf = pytest.importorskip("llama_cpp.llama_grammar")
    seen: set[tuple[str, ...]] = set()
    for task in DEV:
        key = tuple(sorted(task.functions))
        if key in seen:
            continue
        seen.add(key)
        grammar = gbnf.json_schema_to_gbnf(json.dumps(strict_schema(task)))
        assert "root ::=" in grammar, task.id
    assert len(seen) > 50
