"""check_json's fast copy and its careful walk agree on every value, good or bad."""

from __future__ import annotations

import enum
import math
import re
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from closedloop import StateSerializationError
from closedloop.feedback._json import _check, check_json


class Colour(enum.StrEnum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(),
    st.sampled_from([Colour.RED, Level.HIGH]),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(inner, inner),
        st.dictionaries(st.text(max_size=5), inner, max_size=4),
        st.dictionaries(st.integers(), inner, min_size=1, max_size=2),
        st.dictionaries(st.text(max_size=3), inner, max_size=2).map(MappingProxyType),
    ),
    max_leaves=20,
)


def slow(value: Any) -> tuple[str, Any]:
    try:
        return "ok", _check(value, "data", 0, set())
    except StateSerializationError as exc:
        return "error", str(exc)


def fast(value: Any) -> tuple[str, Any]:
    try:
        return "ok", check_json(value)
    except StateSerializationError as exc:
        return "error", str(exc)


@given(values)
def test_the_fast_copy_matches_the_careful_walk(value: Any) -> None:
    got, want = fast(value), slow(value)
    assert got == want
    if got[0] == "ok":
        assert all(type(k) is str for k in _keys(got[1]))


def _keys(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [*value, *(k for v in value.values() for k in _keys(v))]
    if isinstance(value, list):
        return [k for v in value for k in _keys(v)]
    return []


def test_the_copy_is_a_new_object_of_base_types() -> None:
    source = {"a": [1, (2, 3)], "b": Colour.RED, "c": {"d": Level.HIGH}}
    copied = check_json(source)
    assert copied == {"a": [1, [2, 3]], "b": "red", "c": {"d": 3}}
    assert type(copied["b"]) is str and type(copied["c"]["d"]) is int
    assert copied["a"] is not source["a"]


@pytest.mark.parametrize(
    ("bad", "where"),
    [
        ({"x": [1, {"y": math.nan}]}, "data['x'][1]['y']"),
        ({"x": {1: "a"}}, "data['x']: key 1"),
        ({"x": ["\ud800"]}, "data['x'][0]"),
        ({"x": {"s": {1, 2}}}, "data['x']['s']"),
    ],
)
def test_refusals_name_the_exact_path(bad: Any, where: str) -> None:
    with pytest.raises(StateSerializationError, match=re.escape(where)):
        check_json(bad)


def test_cycles_are_refused() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(StateSerializationError, match="circular"):
        check_json({"loop": loop})


def test_a_key_that_is_not_unicode_is_refused_with_its_path() -> None:
    with pytest.raises(StateSerializationError, match=r"\['a'\].*not valid Unicode"):
        check_json({"a": {"\ud800": 1}}, "data")
