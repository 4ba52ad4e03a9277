"""checked_document: a fresh JSON dump is checked without a copy, with check_json's verdicts."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from closedloop import StateSerializationError
from closedloop.feedback import MemoryStore
from closedloop.feedback._json import (
    MAX_DEPTH,
    CheckedDocument,
    check_json,
    checked_document,
    encode_document,
)

# What a model_dump(mode="json") can hold: plain scalars, lists, string-keyed dicts; NaN,
# infinity and lone surrogates are the values check_json refuses among them.
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=4),
    # st.text() leaves lone surrogates out; a model's output may hold them
    st.lists(st.sampled_from(["a", "é", "\ud800", "\udfff"]), max_size=3).map("".join),
)
documents = st.dictionaries(
    st.text(max_size=4),
    st.recursive(
        scalars,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=4), inner, max_size=4)
        ),
        max_leaves=30,
    ),
    max_size=5,
)


def nested(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(levels - 1):
        value = {"x": value}
    return value


def verdict(fn: Any, value: dict[str, Any]) -> tuple[str, str]:
    try:
        return "ok", encode_document(fn(value))
    except StateSerializationError as exc:
        return "error", str(exc)


@given(documents)
def test_accepts_and_refuses_what_check_json_does(value: dict[str, Any]) -> None:
    expected = verdict(check_json, value)
    found = verdict(lambda v: checked_document(v).plain, value)
    assert found == expected


def test_a_good_document_is_kept_not_copied() -> None:
    plain = {"a": [1, 2.5, "x"], "b": {"c": None}}
    doc = checked_document(plain)
    assert doc.plain is plain
    assert doc.text == '{"a":[1,2.5,"x"],"b":{"c":null}}'
    assert dict(doc) == plain


@pytest.mark.parametrize("levels", [MAX_DEPTH, MAX_DEPTH + 1])
def test_depth_limit_matches_check_json(levels: int) -> None:
    value = nested(levels)
    found = verdict(lambda v: checked_document(v).plain, value)
    assert found == verdict(check_json, value)
    assert found[0] == ("ok" if levels <= MAX_DEPTH else "error")


def test_many_shallow_brackets_are_counted_not_refused() -> None:
    value = {"rows": [{"n": i} for i in range(3 * MAX_DEPTH)]}
    assert checked_document(value).plain is value


def test_a_lone_surrogate_is_refused_with_its_path() -> None:
    with pytest.raises(StateSerializationError, match=r"data\['s'\]: string is not valid"):
        checked_document({"s": "\ud800"})


async def test_a_store_takes_it_as_it_is_and_keeps_its_size_limit() -> None:
    store = MemoryStore(max_document_bytes=20)
    doc = checked_document({"n": 1})
    snapshot = await store.create("s", doc)
    assert snapshot.to_dict() == {"n": 1}
    with pytest.raises(StateSerializationError, match="above max_document_bytes=20"):
        await store.put("s", checked_document({"n": "x" * 40}), expected_version=1)
    assert isinstance(doc, CheckedDocument)
