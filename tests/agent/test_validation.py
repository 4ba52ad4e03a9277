"""Validation before anything runs; every failure is an observation the model reads next step."""

from __future__ import annotations

import json
from typing import Any

import pytest

from closedloop.agent import (
    HaltReason,
    ModelSettings,
    RunLimits,
    Task,
    stop_on_no_progress,
    stop_on_repeats,
)
from closedloop.models import CallInfo, FunctionModel, Message, RawCompletion, ToolCall

from .conftest import (
    Inventory,
    add,
    call,
    convert_temperature,
    final,
    make_agent,
    prompt_of,
    scripted,
)

GOOD_ITEM = {"sku": "XYZ-042", "quantity": 2}


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (
            call("convert", value=1),
            "unknown tool 'convert'; available: convert_temperature, add_items, find; did you mean 'convert_temperature'?",
        ),
        (
            call("convert_temperature", value=1, from_unit="celsius", to_unit="rankine"),
            "arguments.to_unit: 'rankine' is not one of ['celsius', 'fahrenheit', 'kelvin']",
        ),
        (
            call(
                "convert_temperature", value=1, from_unit="celsius", to_unit="kelvin", precision=9
            ),
            "arguments.precision: 9 is greater than the maximum of 6",
        ),
        (
            call("convert_temperature", value="hot", from_unit="celsius", to_unit="kelvin"),
            "arguments.value: 'hot' is not of type 'number'",
        ),
        (
            call("add_items", items=[{"sku": "bad", "quantity": 1}], warehouse="north"),
            "arguments.items[0].sku: 'bad' does not match '^[A-Z]{3}-\\\\d{3}$'",
        ),
        (
            call(
                "add_items",
                items=[{**GOOD_ITEM, "size": {"width_cm": 0, "height_cm": 1}}],
                warehouse="north",
            ),
            "arguments.items[0].size: {'width_cm': 0, 'height_cm': 1} is not valid under any of the given schemas",
        ),
        (
            call("add_items", items=[GOOD_ITEM], warehouse="north", priority="high"),
            "arguments: Additional properties are not allowed ('priority' was unexpected)",
        ),
        (call("add_items", warehouse="north"), "arguments: 'items' is a required property"),
    ],
)
async def test_a_bad_action_never_runs_and_its_error_is_shown_next_step(
    bad: dict[str, Any], message: str, inventory: Inventory
) -> None:
    model = scripted(bad, final("gave up"))
    agent, _ = make_agent(model, [convert_temperature, inventory.add_items, inventory.find])
    result = await agent.run("Do the thing.")
    step = result.steps[0]
    assert message in step.validation_errors, step.validation_errors
    assert step.observation is None and step.error == 1.0
    assert inventory.calls == []
    assert message in prompt_of(model, 1)
    assert result.success  # the final answer afterwards is fine: no required fields


async def test_replies_that_are_not_actions_are_refused_with_the_reason() -> None:
    model = scripted(
        "Sure! I will add the numbers for you.",
        '{"tool": "add", "arguments": [1, 2]}',
        '```json\n{"tool": "add", "a": 1, "b": 2}\n```',  # flattened arguments are read
        final("3"),
    )
    agent, _ = make_agent(
        model, [add], limits=RunLimits(stop=stop_on_no_progress(5) | stop_on_repeats(2))
    )
    result = await agent.run("1+2")
    assert "the reply is not a JSON action" in result.steps[0].validation_errors[0]
    assert "'arguments' must be a JSON object" in result.steps[1].validation_errors[0]
    assert result.steps[2].observation is not None
    assert result.steps[2].observation["value"] == 3.0
    assert "read from the top level" in result.steps[2].notes[0]
    assert result.success


async def test_native_tool_calling_uses_function_entries_and_a_final_answer_tool() -> None:
    def reply(messages: tuple[Message, ...], info: CallInfo) -> RawCompletion:
        names = [t["function"]["name"] for t in info.tools]
        assert names == ["add", "final_answer"]
        if "step 1 of" in messages[-1].content:
            calls = (
                ToolCall(id="c1", name="add", arguments=json.dumps({"a": 2, "b": 2})),
                ToolCall(id="c2", name="add", arguments=json.dumps({"a": 9, "b": 9})),
            )
            return RawCompletion(text="", tool_calls=calls)
        if "step 2 of" in messages[-1].content:
            return RawCompletion(
                text="", tool_calls=(ToolCall(id="c3", name="add", arguments="{bad"),)
            )
        answer = json.dumps({"answer": "4", "fields": {"total": 4}})
        return RawCompletion(
            text="", tool_calls=(ToolCall(id="c4", name="final_answer", arguments=answer),)
        )

    model = FunctionModel(reply)
    agent, _ = make_agent(model, [add], model_settings=ModelSettings(tool_calling="native"))
    result = await agent.run(Task(prompt="2+2", required_fields=["total"]))
    assert result.success and result.fields == {"total": 4}
    first = result.steps[0]
    assert first.action is not None and first.action.arguments == {"a": 2, "b": 2}
    assert "1 further calls ignored" in first.notes[0]
    assert "arguments of 'add' are not valid JSON" in result.steps[1].validation_errors[0]
    assert first.actuators["tool_calling"] == "native"
    assert model.calls[0].response_schema is None
    assert "arguments:" not in model.calls[0].messages[0].content  # schemas travel as tools


async def test_plain_text_from_a_native_model_is_its_final_answer() -> None:
    model = FunctionModel(lambda messages, info: "It is 4.")
    agent, _ = make_agent(model, [add], model_settings=ModelSettings(tool_calling="native"))
    result = await agent.run("2+2")
    assert result.halt_reason is HaltReason.FINAL and result.answer == "It is 4."


# --- what the validator and the tool builder keep between calls ---------------------------


def test_a_calls_verdict_is_reused_only_while_its_arguments_are_unchanged() -> None:
    from closedloop.agent import ActionCall
    from closedloop.agent._tools import tools_by_name
    from closedloop.agent._validate import Validator

    validator = Validator(tools_by_name([add]))
    good = ActionCall(tool="add", arguments={"a": 1, "b": 2})
    assert validator.arguments_errors(good) == []
    assert validator.arguments_errors(good) == []
    good.arguments["a"] = "one"  # changed in place: checked again, not remembered
    assert validator.arguments_errors(good) == ["arguments.a: 'one' is not of type 'number'"]
    equal = ActionCall(tool="add", arguments={"a": "one", "b": 2})
    assert validator.arguments_errors(equal) == validator.arguments_errors(good)


def test_equal_schemas_share_one_checked_validator_and_a_function_one_model() -> None:
    from closedloop.agent._tools import tools_by_name
    from closedloop.agent._validate import schema_validator

    first, second = tools_by_name([add])["add"], tools_by_name([add])["add"]
    assert first.parameters == second.parameters
    assert first.parameters is not second.parameters  # each tool owns its schema
    assert schema_validator(first.parameters) is schema_validator(second.parameters)
    assert schema_validator({"type": "object"}) is not schema_validator({"type": "string"})
