"""The task file format: the example file loads, and bad lines name their line and field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from closedloop import ConfigurationError
from closedloop_bench.tools import (
    FAMILIES,
    TaskFileError,
    dump_tasks,
    load_tool_tasks,
    parse_task,
)

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "tools_tasks.jsonl"


def _good() -> dict[str, Any]:
    return {
        "id": "t1",
        "family": "single",
        "domain": "weather",
        "split": "dev",
        "messages": [{"role": "user", "content": "Weather in Oslo in celsius?"}],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": "Weather now.",
                    "parameters": {
                        "type": "object",
                        "properties": {
                            "city": {"type": "string"},
                            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                        },
                        "required": ["city"],
                    },
                },
            }
        ],
        "expected": {
            "calls": [
                {
                    "name": "get_weather",
                    "arguments": {"city": {"text": "oslo"}, "unit": {"exact": "celsius"}},
                }
            ]
        },
    }


def _write(tmp_path: Path, *rows: object) -> Path:
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_example_file_has_ten_tasks_covering_every_family() -> None:
    tasks = load_tool_tasks(EXAMPLE)
    assert len(tasks) == 10
    assert {t.family for t in tasks} == set(FAMILIES)


def test_dump_and_load_round_trip(tmp_path: Path) -> None:
    tasks = load_tool_tasks(EXAMPLE)
    path = tmp_path / "again.jsonl"
    path.write_text(dump_tasks(tasks))
    assert load_tool_tasks(path) == tasks
    assert path.read_text() == EXAMPLE.read_text()


def _error(tmp_path: Path, bad: object, line: int = 2) -> TaskFileError:
    rows: list[object] = [_good(), bad] if line == 2 else [bad]
    with pytest.raises(TaskFileError) as info:
        load_tool_tasks(_write(tmp_path, *rows))
    assert info.value.line == line
    assert f"line {line}" in str(info.value)
    return info.value


def test_missing_field_names_line_and_field(tmp_path: Path) -> None:
    bad = _good()
    bad["id"] = "t2"
    del bad["expected"]
    err = _error(tmp_path, bad)
    assert err.field == "expected"
    assert "missing" in str(err)


def test_unknown_function_in_expected_call(tmp_path: Path) -> None:
    bad = _good()
    bad["id"] = "t2"
    bad["expected"]["calls"][0]["name"] = "get_wether"
    err = _error(tmp_path, bad)
    assert err.field == "expected.calls[0].name"
    assert "get_wether" in str(err) and "get_weather" in str(err)


def test_unknown_argument_in_expected_call(tmp_path: Path) -> None:
    bad = _good()
    bad["id"] = "t2"
    bad["expected"]["calls"][0]["arguments"]["town"] = {"text": "Oslo"}
    err = _error(tmp_path, bad)
    assert err.field == "expected.calls[0].arguments.town"


@pytest.mark.parametrize(
    ("parameters", "words"),
    [
        ({"type": "array"}, '"type": "object"'),
        ({"type": "object", "properties": {"x": {"type": "strng"}}}, "not a valid JSON Schema"),
        ({"type": "object", "properties": {}, "required": ["x"]}, "required names no property"),
    ],
)
def test_bad_schema(tmp_path: Path, parameters: dict[str, Any], words: str) -> None:
    bad = _good()
    bad["id"] = "t2"
    bad["tools"][0]["function"]["parameters"] = parameters
    bad["expected"]["calls"][0]["arguments"] = {}
    err = _error(tmp_path, bad)
    assert err.field == "tools[0].function.parameters"
    assert words in str(err)


def test_rule_with_two_kinds_is_refused(tmp_path: Path) -> None:
    bad = _good()
    bad["id"] = "t2"
    bad["expected"]["calls"][0]["arguments"]["city"] = {"text": "Oslo", "exact": "Oslo"}
    err = _error(tmp_path, bad)
    assert err.field.startswith("expected.calls[0].arguments.city")
    assert "exactly one of" in str(err)


def test_irrelevance_must_expect_no_call(tmp_path: Path) -> None:
    bad = _good()
    bad["id"] = "t2"
    bad["family"] = "irrelevance"
    err = _error(tmp_path, bad)
    assert err.field == "expected"


def test_stateful_task_checks(tmp_path: Path) -> None:
    bad = _good()
    bad["id"] = "t2"
    bad["family"] = "multi_turn"
    assert _error(tmp_path, bad).field == "env"
    bad["env"] = "todo"
    err = _error(tmp_path, bad)
    assert err.field == "tools[0].function.name" and "todo environment" in str(err)
    bad["env"] = "spaceship"
    assert "unknown environment" in str(_error(tmp_path, bad))


def test_not_json_and_duplicate_ids(tmp_path: Path) -> None:
    assert _error(tmp_path, "{not json").field == "(json)"
    assert _error(tmp_path, _good()).field == "id"


def test_bad_enum_value_names_the_field(tmp_path: Path) -> None:
    bad = _good()
    bad["id"] = "t2"
    bad["split"] = "test"
    err = _error(tmp_path, bad)
    assert err.field == "split"


def test_no_file_and_empty_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="not a task file"):
        load_tool_tasks(tmp_path / "nope.jsonl")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(ConfigurationError, match="no tasks"):
        load_tool_tasks(empty)


def test_parse_task_refuses_a_non_object() -> None:
    with pytest.raises(TaskFileError, match="JSON object"):
        parse_task([1, 2])
