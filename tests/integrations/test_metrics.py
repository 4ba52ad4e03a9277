"""Sensing: default and JSON metrics, HTTP status errors, and the metric-output check."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from closedloop import ConfigurationError
from closedloop.integrations import (
    EMPTY_ERROR,
    Invocation,
    check_error,
    default_metric,
    json_metric,
    status_error,
)
from closedloop.integrations._metrics import as_sensor
from closedloop.perception import Observation, ObservationStatus


@pytest.mark.parametrize("empty", [None, "", "  \n", b"", [], {}, (), set()])
def test_empty_answers_score_high(empty: Any) -> None:
    assert default_metric(empty) == EMPTY_ERROR > 0.5


@pytest.mark.parametrize("answer", ["ok", 0, False, [0], {"a": None}, object()])
def test_anything_else_scores_zero_by_default(answer: Any) -> None:
    assert default_metric(answer) == 0.0


def test_observations_score_by_status_and_confidence() -> None:
    ok = Observation.ok({"t": 1}, source="s", timestamp=0.0, confidence=0.7)
    assert default_metric(ok) == pytest.approx(0.3)
    empty = Observation.empty(source="s", timestamp=0.0)
    assert default_metric(empty) >= EMPTY_ERROR
    failed = ok.model_copy(update={"status": ObservationStatus.TIMEOUT})
    assert default_metric(failed) == 1.0


class Weather(BaseModel):
    city: str
    temperature: float


def test_json_metric_counts_missing_key_fields() -> None:
    metric = json_metric(["city", "temperature"])
    assert metric({"city": "北京", "temperature": 25}) == 0.0
    assert metric({"city": "北京"}) == 0.5
    assert metric({"city": "", "temperature": None}) == 1.0
    assert metric('Sure! ```json\n{"city": "Paris", "temperature": 21,}\n```') == 0.0
    assert metric("no json here") == 1.0
    assert metric(None) == 1.0
    assert metric(42) == 1.0
    assert metric(Weather(city="Oslo", temperature=3.0)) == 0.0
    assert json_metric(["0.city"])([{"city": "x"}]) == 0.0


def test_json_metric_with_a_schema_rejects_invalid_answers() -> None:
    metric = json_metric(schema=Weather)
    assert metric({"city": "Oslo", "temperature": 3}) == 0.0
    assert metric({"city": "Oslo", "temperature": "warm"}) == 1.0
    assert metric('{"city": "Oslo"}') == 1.0
    schema = {"type": "object", "required": ["city"]}
    assert json_metric(["temperature"], schema)({"city": "x"}) == 1.0
    assert json_metric(["temperature"], schema)({"city": "x", "temperature": 1}) == 0.0


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"key_fields": "city"}, "key_fields"),
        ({"key_fields": ["city", ""]}, "key_fields[1]"),
        ({"key_fields": [3]}, "key_fields[0]"),
    ],
)
def test_json_metric_refuses_bad_fields(kwargs: dict[str, Any], argument: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        json_metric(**kwargs)
    assert info.value.argument == argument


def test_json_metric_refuses_a_bad_schema_at_once() -> None:
    with pytest.raises(ConfigurationError):
        json_metric(schema={"type": "no-such-type"})


@pytest.mark.parametrize(
    ("status", "error"),
    [(200, 0.0), (204, 0.0), (302, 0.0), (404, 0.0), (422, 0.0), (408, 1.0), (429, 1.0),
     (500, 1.0), (503, 1.0)],
)  # fmt: skip
def test_status_error(status: int, error: float) -> None:
    assert status_error(status) == error


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_finite_metric_values_are_clipped_with_a_note(value: float) -> None:
    error, note = check_error(value)
    assert 0.0 <= error <= 1.0
    if 0.0 <= value <= 1.0:
        assert error == value and note is None
    else:
        assert error in (0.0, 1.0)
        assert note is not None and repr(value) in note and "clipped" in note


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, "0.3", None, [0.1]])
def test_broken_metric_values_raise_naming_the_metric(value: Any) -> None:
    with pytest.raises(ConfigurationError) as info:
        check_error(value, "body_metric")
    assert info.value.argument == "body_metric"
    assert info.value.value is value


def test_booleans_are_zero_or_one() -> None:
    assert check_error(True) == (1.0, None)
    assert check_error(False) == (0.0, None)


def test_metrics_with_one_or_two_arguments() -> None:
    invocation = Invocation(("北就",), {})

    def edit(result: str, call: Invocation) -> float:
        return 0.0 if result == call.args[0] else 0.5

    assert as_sensor(edit)("北京", invocation) == 0.5
    assert as_sensor(lambda r: len(r) / 10)("abc", invocation) == pytest.approx(0.3)
    assert as_sensor(len)("abc", invocation) == 3  # no signature: one argument
    assert as_sensor(None)("", invocation) == EMPTY_ERROR

    def three(a: object, b: object, c: object) -> float:
        return 0.0

    def none() -> float:
        return 0.0

    for bad in (three, none, "metric"):
        with pytest.raises(ConfigurationError) as info:
            as_sensor(bad)
        assert info.value.argument == "metric"
