"""Tool schemas from signatures, the @tool decorator, other tool forms, and answer wrapping."""

from __future__ import annotations

import asyncio
from typing import Any

import jsonschema
import pytest

from closedloop import ConfigurationError, ToolError
from closedloop.agent import Tool, as_tool, requires_nonempty, tool
from closedloop.agent._actions import inline_refs
from closedloop.agent._tools import to_observation
from closedloop.execution import AtomicAction, EffectClass
from closedloop.perception import EMPTY_MEANING, HttpTool, Observation, ObservationStatus

from .conftest import Inventory, Unit, add, convert_temperature, divide


def _valid(tool_: Tool, arguments: dict[str, Any]) -> bool:
    return jsonschema.Draft202012Validator(tool_.parameters).is_valid(arguments)


def test_calculator_schema_comes_from_hints_and_docstring() -> None:
    t = as_tool(add)
    assert t.name == "add"
    assert t.description == "Add two numbers."
    props = t.parameters["properties"]
    assert props["a"] == {"type": "number", "description": "the first addend"}
    assert t.parameters["required"] == ["a", "b"]
    assert t.parameters["additionalProperties"] is False
    assert _valid(t, {"a": 1, "b": 2.5})
    assert not _valid(t, {"a": "one", "b": 2})
    assert not _valid(t, {"a": 1, "b": 2, "c": 3})
    assert as_tool(divide).description == "Divide one number by another."


def test_unit_converter_schema_has_enums_defaults_and_ranges() -> None:
    t = as_tool(convert_temperature)
    flat = inline_refs(t.parameters)
    assert flat["properties"]["from_unit"]["enum"] == ["celsius", "fahrenheit", "kelvin"]
    assert flat["properties"]["precision"]["maximum"] == 6
    assert "precision" not in flat["required"]
    assert "$defs" not in flat and "$ref" not in str(flat)
    assert _valid(t, {"value": 1, "from_unit": "celsius", "to_unit": "kelvin"})
    assert not _valid(t, {"value": 1, "from_unit": "celsius", "to_unit": "rankine"})
    assert not _valid(t, {"value": 1, "from_unit": "celsius", "to_unit": "kelvin", "precision": 9})


def test_inventory_schema_has_nested_objects_and_arrays(inventory: Inventory) -> None:
    t = as_tool(inventory.add_items)
    good = {
        "items": [
            {
                "sku": "XYZ-042",
                "quantity": 3,
                "tags": ["a"],
                "size": {"width_cm": 1, "height_cm": 2},
            }
        ],
        "warehouse": "north",
    }
    assert _valid(t, good)
    bad_nested = {**good, "items": [{"sku": "XYZ-042", "quantity": 3, "size": {"width_cm": 0}}]}
    assert not _valid(t, bad_nested)
    assert not _valid(t, {**good, "items": [{"sku": "bad", "quantity": 1}]})
    assert not _valid(t, {**good, "warehouse": "east"})


async def test_the_runner_coerces_json_into_typed_arguments(inventory: Inventory) -> None:
    t = as_tool(inventory.add_items)
    stock = await t.action.fn(items=[{"sku": "XYZ-042", "quantity": 3}], warehouse="south")
    assert stock == {"ABC-001": 5, "XYZ-042": 3}
    (_, (items, warehouse)) = inventory.calls[-1]
    assert type(items[0]).__name__ == "Item" and warehouse == "south"
    converted = await as_tool(convert_temperature).action.fn(
        value=212, from_unit="fahrenheit", to_unit="celsius"
    )
    assert converted == {"value": 100.0, "unit": "celsius"}


async def test_a_bad_argument_is_a_tool_error_and_a_bug_is_the_tools_own() -> None:
    def broken(x: int) -> int:
        """Always fails."""
        raise TypeError("boom")

    with pytest.raises(TypeError, match="boom"):  # valid arguments: the tool's own bug
        await as_tool(broken).action.fn(x=1)
    with pytest.raises(ToolError, match="do not fit"):
        await as_tool(broken).action.fn(x="not a number")
    schema = {"type": "function", "function": {"name": "broken", "parameters": {}}}
    with pytest.raises(ToolError, match="broken raised TypeError: boom"):  # unchecked
        await Tool.from_openai(schema, broken).action.fn(x=1)


def test_the_decorator_keeps_the_function_callable_and_carries_options() -> None:
    @tool(core=False, effect="irreversible", depends_on=("search",), phases=("committing",))
    def book(room: str, date: str) -> str:
        """Book a room."""
        return f"{room}@{date}"

    assert book("A", "2024-05-01") == "A@2024-05-01"
    t = as_tool(book)
    assert (t.core, t.effect, t.depends_on, t.phases) == (
        False,
        EffectClass.IRREVERSIBLE,
        ("search",),
        frozenset({"committing"}),
    )

    @tool
    def plain(x: int) -> int:
        """Plain."""
        return x

    assert as_tool(plain).core is True
    assert as_tool(plain, name="renamed").name == "renamed"


async def test_an_atomic_action_keeps_its_contract() -> None:
    async def send(to: str, body: str) -> str:
        return "sent"

    action = AtomicAction(name="send", fn=send, effect=EffectClass.ONCE, timeout_s=3.0)
    t = as_tool(action, description="Send a message.")
    assert t.action is action and t.fixed_timeout
    assert t.parameters["required"] == ["to", "body"]
    assert t.description == "Send a message."


async def test_an_openai_schema_with_an_executor_is_a_tool() -> None:
    schema = {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Look a word up.",
            "parameters": {
                "type": "object",
                "properties": {"word": {"type": "string", "minLength": 1}},
                "required": ["word"],
            },
        },
    }
    seen: list[str] = []

    async def executor(word: str) -> dict[str, str]:
        seen.append(word)
        return {"word": word, "meaning": "..."}

    t = as_tool((schema, executor))
    assert t.openai_schema() == schema
    assert await t.action.fn(word="loop") == {"word": "loop", "meaning": "..."}
    assert seen == ["loop"]
    with pytest.raises(ConfigurationError, match="executor"):
        as_tool(schema)


def test_an_http_tool_gets_its_parameters_from_the_url_template() -> None:
    http = HttpTool("weather", "GET", "http://127.0.0.1:1/weather/{city}")
    t = as_tool(http)
    assert t.name == "weather"
    assert t.parameters["required"] == ["city"]
    assert t.parameters["properties"]["city"] == {"type": "string"}


@pytest.mark.parametrize("bad", ["final", "final_answer", "has space", ""])
def test_reserved_or_malformed_names_are_refused(bad: str) -> None:
    with pytest.raises(ConfigurationError, match="name"):
        as_tool(add, name=bad)


@pytest.mark.parametrize("empty", [None, [], {}, "", "   ", ()])
def test_empty_answers_are_no_match_not_no_constraint(empty: Any) -> None:
    obs = to_observation(empty, source="search", timestamp=1.0)
    assert obs.status is ObservationStatus.EMPTY
    assert obs.meaning == EMPTY_MEANING


def test_values_and_observations_wrap_as_expected() -> None:
    assert to_observation([1], source="s", timestamp=1.0).status is ObservationStatus.OK
    assert to_observation(0, source="s", timestamp=1.0).status is ObservationStatus.OK
    given = Observation.failed("down", source="s", timestamp=1.0)
    assert to_observation(given, source="s", timestamp=2.0) is given


def test_requires_nonempty_reads_the_latest_answer() -> None:
    check = requires_nonempty("availability")
    assert check({}, {"latest": {}}) == "availability has not answered yet"
    empty = {"status": "empty", "meaning": EMPTY_MEANING}
    verdict = check({}, {"latest": {"availability": empty}})
    assert isinstance(verdict, str) and "non-empty answer is required" in verdict
    assert check({}, {"latest": {"availability": {"status": "ok"}}}) is True


def test_async_tools_run_on_the_loop_and_sync_ones_in_a_thread() -> None:
    async def slow_echo(text: str) -> str:
        await asyncio.sleep(0)
        return text

    assert asyncio.run(as_tool(slow_echo).action.fn(text="hi")) == "hi"
    assert asyncio.run(as_tool(lambda_free_upper).action.fn(text="hi")) == "HI"
    assert Unit("kelvin") is Unit.KELVIN


def lambda_free_upper(text: str) -> str:
    """Upper-case a text."""
    return text.upper()


def test_a_stored_observation_replayed_by_the_ledger_reads_as_itself() -> None:
    from closedloop.agent._tools import to_observation
    from closedloop.perception import Observation

    original = Observation.empty(source="rooms", timestamp=5.0)
    stored = original.model_dump(mode="json")
    again = to_observation(stored, source="rooms", timestamp=9.0)
    assert again.status == "empty"
    assert again == original
    plain = to_observation({"status": "ok", "rooms": []}, source="rooms", timestamp=9.0)
    assert plain.status == "ok" and plain.value == {"status": "ok", "rooms": []}
