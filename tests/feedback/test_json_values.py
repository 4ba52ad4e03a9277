"""Property tests: every JSON value round-trips exactly; anything else is refused with its path."""

from __future__ import annotations

import itertools
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from closedloop import StateSerializationError
from closedloop.feedback import MemoryStore, SQLiteStore, SyncStore
from closedloop.feedback._json import MAX_DEPTH, check_json, freeze, thaw

from .conftest import same_json

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(), children, max_size=5)
    ),
    max_leaves=25,
)
documents = st.dictionaries(st.text(), json_values, max_size=6)

bad_leaves = st.sampled_from(
    [
        ({1, 2}, "object of type set"),
        (frozenset(), "object of type frozenset"),
        (b"bytes", "object of type bytes"),
        (object(), "object of type object"),
        (1 + 2j, "object of type complex"),
        (Decimal("1.5"), "object of type Decimal"),
        (float("nan"), "float nan is not valid JSON"),
        (float("-inf"), "float -inf is not valid JSON"),
        (range(3), "object of type range"),
    ]
)


def _sync_store(kind: str, tmp_path: Path) -> SyncStore:
    if kind == "memory":
        return SyncStore(MemoryStore())
    return SyncStore(SQLiteStore(tmp_path / "json.db"))


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_any_json_document_round_trips_exactly(kind: str, tmp_path: Path) -> None:
    ids = itertools.count()
    with _sync_store(kind, tmp_path) as store:

        @given(first=documents, second=documents)
        def check(first: dict[str, Any], second: dict[str, Any]) -> None:
            session = f"s{next(ids)}"
            created = store.create(session, first)
            assert same_json(thaw(created.data), first)
            assert same_json(thaw(store.get(session).data), first)
            store.put(session, second, expected_version=1)
            assert same_json(store.get(session).to_dict(), second)
            record = store.record_put("values", session, second)
            assert same_json(record.to_dict(), second)
            fetched = store.record_get("values", session)
            assert fetched is not None and same_json(fetched.to_dict(), second)

        check()


def test_non_json_values_are_refused_with_the_path(tmp_path: Path) -> None:
    # The gate is shared by every backend (test_store_contract checks both refuse).
    with _sync_store("memory", tmp_path) as store:
        store.create("s", {"safe": True})

        @given(
            doc=st.dictionaries(st.text(), json_values, min_size=1), bad=bad_leaves, data=st.data()
        )
        def check(doc: dict[str, Any], bad: tuple[object, str], data: st.DataObject) -> None:
            # Walk down to a random place in the document and plant the bad value there.
            path = "data"
            container: Any = doc
            while True:
                keys = list(container) if isinstance(container, dict) else range(len(container))
                key = data.draw(st.sampled_from(list(keys)))
                path += f"[{key!r}]"
                child = container[key]
                if isinstance(child, dict | list) and child and data.draw(st.booleans()):
                    container = child
                    continue
                container[key] = bad[0]
                break
            with pytest.raises(StateSerializationError) as info:
                store.put("s", doc, expected_version=1)
            assert str(info.value) == f"{path}: {bad[1]}" or str(info.value).startswith(
                f"{path}: {bad[1]} "
            )
            assert store.get("s").to_dict() == {"safe": True}

        check()


@given(json_values)
def test_freeze_thaw_round_trip_and_check_is_idempotent(value: Any) -> None:
    plain = check_json(value)
    assert same_json(plain, value)
    assert same_json(thaw(freeze(plain)), value)
    assert same_json(check_json(freeze(plain)), value)


def test_subclasses_of_json_types_are_stored_as_base_types() -> None:
    from enum import IntEnum, StrEnum

    class Colour(StrEnum):
        RED = "red"

    class Level(IntEnum):
        HIGH = 3

    class Ratio(float):
        pass

    plain = check_json({Colour.RED: [Level.HIGH, Ratio(0.5), Colour.RED]})
    assert same_json(plain, {"red": [3, 0.5, "red"]})
    assert type(next(iter(plain))) is str


def test_nesting_past_the_limit_is_refused() -> None:
    deep: Any = 1
    for _ in range(MAX_DEPTH + 1):
        deep = [deep]
    with pytest.raises(StateSerializationError, match=f"nested deeper than {MAX_DEPTH}"):
        check_json(deep)
    shallow: Any = 1
    for _ in range(MAX_DEPTH - 1):
        shallow = [shallow]
    assert check_json(shallow) == shallow
