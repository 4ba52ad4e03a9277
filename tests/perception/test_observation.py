"""Observation: the shared contract, its constructors, and compaction of huge values."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from closedloop import ConfigurationError
from closedloop.perception import (
    EMPTY_MEANING,
    Observation,
    ObservationStatus,
    compact,
    json_size,
)


def test_status_values_are_the_contract() -> None:
    assert [s.value for s in ObservationStatus] == [
        "ok",
        "empty",
        "partial",
        "stale",
        "error",
        "rate_limited",
        "timeout",
    ]
    assert ObservationStatus("rate_limited") is ObservationStatus.RATE_LIMITED


def test_fields_are_the_contract_and_the_model_is_frozen() -> None:
    assert list(Observation.model_fields) == [
        "value",
        "confidence",
        "timestamp",
        "source",
        "status",
        "meaning",
        "raw",
        "latency_s",
        "error",
        "retry_after_s",
        "age_s",
    ]
    obs = Observation.ok({"t": 1}, source="api", timestamp=10.0)
    with pytest.raises(ValidationError):
        obs.confidence = 0.5  # type: ignore[misc]


@pytest.mark.parametrize(
    "bad",
    [
        {"confidence": 1.5},
        {"confidence": -0.1},
        {"confidence": float("nan")},
        {"timestamp": float("inf")},
        {"source": ""},
        {"meaning": ""},
        {"latency_s": -1.0},
        {"age_s": -0.5},
        {"status": "fine"},
        {"surprise": 1},
    ],
)
def test_invalid_observations_are_refused(bad: dict[str, Any]) -> None:
    fields: dict[str, Any] = {
        "value": 1,
        "confidence": 1.0,
        "timestamp": 0.0,
        "source": "s",
        "status": "ok",
        "meaning": "m",
    }
    with pytest.raises(ValidationError):
        Observation(**{**fields, **bad})


def test_empty_is_never_read_as_no_constraint() -> None:
    obs = Observation.empty(source="rooms", timestamp=5.0)
    assert obs.status is ObservationStatus.EMPTY
    assert obs.value == []
    assert obs.meaning == EMPTY_MEANING == "no match found; this is not the absence of a constraint"
    assert obs.confidence == 0.9
    assert obs.usable
    assert Observation.empty(source="s", value=None).value is None  # an explicit None stays


def test_constructors_set_status_and_explain_themselves() -> None:
    stale = Observation.stale([1], source="api", age_s=12.0, timestamp=1.0)
    assert (stale.status, stale.confidence, stale.age_s) == (ObservationStatus.STALE, 0.7, 12.0)
    assert "12.0 s ago" in stale.meaning
    partial = Observation.partial({"a": 1}, source="api", missing=["b", "c"], timestamp=1.0)
    assert partial.confidence == 0.6 and "b, c" in partial.meaning
    failed = Observation.failed("HTTP 500", source="api", confidence=0.2, timestamp=1.0)
    assert failed.status is ObservationStatus.ERROR and failed.error == "HTTP 500"
    assert not failed.usable
    limited = Observation.rate_limited(source="api", retry_after_s=3.0, timestamp=1.0)
    assert limited.confidence == 0.0 and "retry after 3 s" in limited.meaning
    timeout = Observation.timeout(source="api", timeout_s=0.5, timestamp=1.0)
    assert timeout.status is ObservationStatus.TIMEOUT and not timeout.usable


def test_observations_round_trip_through_json() -> None:
    obs = Observation.stale({"城市": "北京", "t": [1.5]}, source="api", age_s=3.0, timestamp=9.0)
    again = Observation.model_validate_json(obs.model_dump_json())
    assert again == obs


def test_compacted_observation_names_the_cut_in_its_meaning() -> None:
    obs = Observation.ok({"rows": list(range(5000))}, source="db", timestamp=0.0, raw="x" * 9000)
    small = obs.compacted(500)
    assert json_size(small.value) <= 500 and json_size(small.raw) <= 500
    assert "value compacted" in small.meaning and "raw compacted" in small.meaning
    assert "kept" in small.meaning and "rows" in small.meaning
    assert obs.compacted(10**6) is obs


def test_compact_marks_every_cut_in_the_value_and_the_note() -> None:
    data = {"a": "x" * 500, "b": list(range(200)), "c": 1}
    result = compact(data, 120)
    assert result.cut and result.original_chars == json_size(data)
    assert result.kept_chars == json_size(result.value) <= 120
    assert result.value["c"] == 1  # small values survive whole
    assert result.value["a"].endswith("chars]") and result.value["b"][-1].endswith("more items]")
    assert result.note is not None and "$.a" in result.note and "$.b" in result.note
    many_keys = compact({f"k{i}": i for i in range(500)}, 100)
    assert "more keys" in many_keys.value["…"] and "dropped" in (many_keys.note or "")
    with pytest.raises(ConfigurationError):
        compact(data, 10)


def test_compact_survives_values_that_are_not_json() -> None:
    loop: list[Any] = []
    loop.append(loop)
    result = compact({"obj": object(), "loop": loop, (1, 2): b"\x00" * 10_000}, 200)
    assert json_size(result.value) <= 200 and result.cut


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda c: st.lists(c, max_size=8) | st.dictionaries(st.text(max_size=10), c, max_size=8),
    max_leaves=40,
)


@given(JSON_VALUES, st.integers(64, 600))
def test_compact_fits_the_budget_and_touches_nothing_that_fits(value: Any, budget: int) -> None:
    result = compact(value, budget)
    assert json_size(result.value) <= budget
    if json_size(value) <= budget:
        assert result.value is value and result.note is None
    else:
        assert result.note is not None and result.note.startswith("compacted from")
        json.dumps(result.value)  # still plain JSON
