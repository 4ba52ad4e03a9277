"""sanitize_json on hand-written edge cases, and its properties under Hypothesis."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from closedloop import ConfigurationError
from closedloop.perception import sanitize_json


class Weather(BaseModel):
    city: str
    temperature: float


WEATHER_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "temperature": {"type": "number"}},
    "required": ["city", "temperature"],
}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a": 1}', {"a": 1}),
        ("[1, 2, 3]", [1, 2, 3]),
        ('Sure! Here you go: {"a": 1} Hope this helps.', {"a": 1}),
        ('```json\n{"a": [1, {"b": null}]}\n```', {"a": [1, {"b": None}]}),
        ('```\n[{"x": true}]\n```\nDone.', [{"x": True}]),
        ('{"a": 1} {"a": 2}', {"a": 1}),
        ('{"s": "a } inside { and ] ["}', {"s": "a } inside { and ] ["}),
        ('{"s": "she said \\"hi}\\" twice"}', {"s": 'she said "hi}" twice'}),
        ('{"s": "back\\\\"} trailing "quote', {"s": "back\\"}),
        ('答案如下：{"城市": "北京", "天气": "晴"}，祝好！', {"城市": "北京", "天气": "晴"}),
        ('Use {curly} braces for templates. {"a": 1}', {"a": 1}),
        ('Sorry :-{ here it is: {"a": 1}', {"a": 1}),
        ("See [note] and [1, 2]", [1, 2]),
        ('{"a": 1 ] {"b": 2}', {"b": 2}),
        ('  \n\t{ "a" :\n 1 }\n', {"a": 1}),
        ('{"emoji": "\\ud83d\\ude00 😀", "z": "\\u5317"}', {"emoji": "😀 😀", "z": "北"}),
        ("{}", {}),
        ("[]", []),
    ],
)
def test_recovers_the_first_complete_json(text: str, expected: Any) -> None:
    result = sanitize_json(text)
    assert result.ok, result.errors
    assert result.data == expected
    assert result.errors == ()
    assert result.span is not None
    start, end = result.span
    assert json.loads(text[start:end]) == expected or result.repairs


@pytest.mark.parametrize(
    ("text", "expected", "repair"),
    [
        ('{"a": [1, 2,], "b": 3,}', {"a": [1, 2], "b": 3}, "trailing commas"),
        ("{'a': 'it\\'s', 'b': \"x\"}", {"a": "it's", "b": "x"}, "single-quoted"),
        (
            '{"ok": True, "none": None, "no": False}',
            {"ok": True, "none": None, "no": False},
            "Python",
        ),
        ('{"text": "line one\nline two"}', {"text": "line one\nline two"}, "control characters"),
        ("{'q': 'say \"hi\"'}", {"q": 'say "hi"'}, "single-quoted"),
    ],
)
def test_conservative_repairs_are_noted(text: str, expected: Any, repair: str) -> None:
    result = sanitize_json(text)
    assert result.ok, result.errors
    assert result.data == expected
    assert any(repair in r for r in result.repairs), result.repairs
    strict = sanitize_json(text, repair=False)
    assert not strict.ok


def test_repairs_never_touch_strings() -> None:
    text = '{"a": "True, None, \'x\', [1,]"}'
    result = sanitize_json(text)
    assert result.data == {"a": "True, None, 'x', [1,]"}
    assert result.repairs == ()


@pytest.mark.parametrize(
    "text",
    [
        '{"a": {"b": 1}, "c": ',
        'Here: ```json\n{"city": "北京", "temp',
        '[1, 2, {"x": [3',
        '{"s": "unterminated',
        "{",
    ],
)
def test_truncated_output_fails_cleanly_and_never_returns_a_fragment(text: str) -> None:
    result = sanitize_json(text)
    assert not result.ok
    assert result.data is None
    assert any("truncated" in e for e in result.errors)


@pytest.mark.parametrize(
    "text", ["", "no json here", "{curly} [note]", '{"a": NaN}', '{"a": Infinity}', "{'a': b}"]
)
def test_nothing_usable_is_not_ok(text: str) -> None:
    result = sanitize_json(text)
    assert not result.ok and result.data is None and result.errors


def test_a_later_candidate_is_taken_when_an_earlier_one_fails_to_parse() -> None:
    result = sanitize_json('{"a": oops} then {"a": 2}')
    assert result.ok and result.data == {"a": 2}
    assert result.skipped == 1


@pytest.mark.parametrize("schema", [Weather, WEATHER_SCHEMA])
def test_schema_validation_with_pydantic_or_json_schema(schema: Any) -> None:
    good = sanitize_json('reply: {"city": "北京", "temperature": 25}', schema)
    assert good.ok and good.data == {"city": "北京", "temperature": 25}
    assert (good.model is not None) is (schema is Weather)
    renamed = sanitize_json('{"town": "北京", "temperature": 25}', schema)
    assert not renamed.ok
    assert renamed.data == {"town": "北京", "temperature": 25}  # parsed, but not accepted
    assert any("city" in e for e in renamed.errors)


def test_with_a_schema_the_first_valid_candidate_wins() -> None:
    text = 'As noted in [1], the answer is {"city": "上海", "temperature": 30.5}.'
    assert sanitize_json(text).data == [1]  # without a schema: the first complete JSON
    result = sanitize_json(text, Weather)
    assert result.ok and result.data == {"city": "上海", "temperature": 30.5}
    assert result.skipped == 1
    assert isinstance(result.model, Weather) and result.model.temperature == 30.5


def test_bad_schemas_are_configuration_errors() -> None:
    with pytest.raises(ConfigurationError) as info:
        sanitize_json("{}", {"type": "no-such-type"})
    assert info.value.argument == "schema"
    with pytest.raises(ConfigurationError):
        sanitize_json("{}", schema=42)
    with pytest.raises(ConfigurationError):
        sanitize_json(b"{}")  # type: ignore[arg-type]


def test_deep_nesting_and_huge_input_do_not_crash() -> None:
    deep = "[" * 50_000 + "]" * 50_000
    result = sanitize_json(deep)
    assert not result.ok and any("deeply" in e for e in result.errors)
    big = "prose " * 100_000 + json.dumps({"k": list(range(10_000))}) + " end"
    assert sanitize_json(big).data == {"k": list(range(10_000))}


JSON_LEAVES = (
    st.none()
    | st.booleans()
    | st.integers(-(10**18), 10**18)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
JSON_VALUES = st.recursive(
    JSON_LEAVES,
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5)
    ),
    max_leaves=20,
)
CONTAINERS = st.lists(JSON_VALUES, max_size=5) | st.dictionaries(
    st.text(max_size=8), JSON_VALUES, max_size=5
)
# Prose before the JSON has no brackets (a bracket there could itself be JSON, "[1]");
# prose after it may hold anything.
PROSE_BEFORE = st.text(alphabet=st.characters(blacklist_characters="{}[]"), max_size=80)


@given(st.text(max_size=400))
def test_arbitrary_text_never_raises(text: str) -> None:
    result = sanitize_json(text)
    if result.ok:
        assert isinstance(result.data, list | dict) and result.errors == ()
    else:
        assert result.errors


@given(PROSE_BEFORE, CONTAINERS, st.text(max_size=80), st.booleans(), st.booleans())
def test_json_dumps_embedded_in_prose_is_recovered_exactly(
    before: str, value: Any, after: str, ensure_ascii: bool, indent: bool
) -> None:
    dumped = json.dumps(value, ensure_ascii=ensure_ascii, indent=2 if indent else None)
    result = sanitize_json(before + dumped + after)
    assert result.ok, result.errors
    assert result.data == value
    assert result.repairs == ()
    assert result.span == (len(before), len(before) + len(dumped))


@given(CONTAINERS, st.integers(min_value=1))
def test_any_strict_prefix_of_a_container_is_never_ok(value: Any, cut: int) -> None:
    dumped = json.dumps(value)
    prefix = dumped[: cut % len(dumped)]
    result = sanitize_json(prefix)
    assert not result.ok
