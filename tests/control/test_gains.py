"""Gain tables and the gain predictor: rows, JSON at the boundary, the fallback rules."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from closedloop import ConfigurationError
from closedloop.control import (
    GAIN_LIMITS,
    GainPredictor,
    Gains,
    GainTable,
    choose_gains,
)

FIXED = Gains()
FAST = Gains(kp=1.6, ki=0.2, kd=0.0, eso_window=6, eso_min_samples=3)
SLOW = Gains(kp=0.3, ki=0.0, kd=0.0)


def table(**rows: Gains) -> GainTable:
    return GainTable({"default": FIXED, **rows}, created_at=1000.0, note="test")


def test_a_known_key_gets_its_row_and_an_unknown_one_the_default() -> None:
    t = table(flight=FAST)
    assert t.gains_for("flight") == (FAST, "flight")
    assert t.gains_for("weather") == (FIXED, "default")
    assert t.gains_for(None) == (FIXED, "default")


def test_a_table_needs_a_default_row() -> None:
    with pytest.raises(ConfigurationError, match="default"):
        GainTable({"flight": FAST}, created_at=0.0)


@pytest.mark.parametrize(
    ("name", "value"),
    [("kp", -0.1), ("kp", 5.5), ("ki", 2.5), ("kd", float("nan")), ("eso_window", 500)],
)
def test_out_of_range_gains_are_refused_by_name(name: str, value: float) -> None:
    with pytest.raises(ConfigurationError, match=name):
        Gains(**{name: value})  # type: ignore[arg-type]


def test_the_window_must_hold_the_samples_the_eso_needs() -> None:
    with pytest.raises(ConfigurationError, match="eso_window"):
        Gains(eso_window=3, eso_min_samples=5)


gain_values = st.builds(
    Gains,
    kp=st.floats(*GAIN_LIMITS["kp"]),
    ki=st.floats(*GAIN_LIMITS["ki"]),
    kd=st.floats(*GAIN_LIMITS["kd"]),
    eso_window=st.integers(50, 200),
    eso_min_samples=st.integers(1, 50),
)


@given(st.dictionaries(st.text(min_size=1, max_size=8), gain_values, max_size=4), gain_values)
def test_a_table_survives_its_json(rows: dict[str, Gains], default: Gains) -> None:
    t = GainTable({**rows, "default": default}, created_at=12.5, note="n")
    back = GainTable.from_json(t.to_json())
    assert dict(back.rows) == dict(t.rows)
    assert back.created_at == 12.5 and back.note == "n"


def test_json_with_an_out_of_range_row_is_a_configuration_error() -> None:
    data = json.loads(table(flight=FAST).to_json())
    data["rows"]["flight"]["kp"] = 99.0
    with pytest.raises(ConfigurationError, match="kp"):
        GainTable.from_json(json.dumps(data))


@pytest.mark.parametrize("text", ["", "[]", '{"kind": "gain_table"}', '{"rows": {}}'])
def test_malformed_json_is_a_configuration_error(text: str) -> None:
    with pytest.raises(ConfigurationError):
        GainTable.from_json(text)


def test_choose_gains_uses_a_fresh_table() -> None:
    choice = choose_gains(table(flight=FAST), FIXED, key="flight", now=1010.0, max_age_s=60.0)
    assert choice.gains == FAST and choice.source == "table:flight" and choice.warning is None


def test_a_missing_source_means_fixed_gains_without_a_warning() -> None:
    assert choose_gains(None, SLOW, key="flight") == choose_gains(None, SLOW)
    assert choose_gains(None, SLOW).gains == SLOW


@pytest.mark.parametrize("now", [1061.0, 999.0])
def test_a_stale_or_future_table_falls_back_with_a_warning(now: float) -> None:
    choice = choose_gains(table(flight=FAST), SLOW, key="flight", now=now, max_age_s=60.0)
    assert choice.gains == SLOW and choice.source == "fixed"
    assert choice.warning is not None and "stale" in choice.warning


def predictor(k: int = 1) -> GainPredictor:
    # Two clusters of queries: near 0 the slow gains served, near 1 the fast ones.
    return GainPredictor(
        candidates=(FIXED, SLOW, FAST),
        points=((0.0, 0.0), (0.1, 0.0), (1.0, 1.0), (0.9, 1.0)),
        scores=((0.5, 1.0, 0.0), (0.5, 1.0, 0.0), (0.5, 0.0, 1.0), (0.5, 0.0, 1.0)),
        fallback=FIXED,
        created_at=1000.0,
        k=k,
    )


def test_the_predictor_picks_what_served_the_nearest_queries() -> None:
    assert predictor().predict((0.05, 0.0)) == SLOW
    assert predictor(k=2).predict((0.95, 0.9)) == FAST


def test_a_tie_goes_to_the_first_candidate() -> None:
    # k=4: all points vote; slow and fast each average 0.5, as do the fixed gains.
    assert predictor(k=4).predict((0.5, 0.5)) == FIXED


def test_the_predictor_survives_its_json_and_predicts_the_same() -> None:
    p = predictor(k=2)
    back = GainPredictor.from_json(p.to_json())
    for q in [(0.0, 0.1), (0.8, 0.8), (0.4, 0.6)]:
        assert back.predict(q) == p.predict(q)


def test_choose_gains_with_a_predictor_needs_features_of_the_right_size() -> None:
    p = predictor()
    assert choose_gains(p, FIXED, features=(1.0, 1.0)).gains == FAST
    no_features = choose_gains(p, SLOW)
    assert no_features.gains == SLOW and no_features.warning is not None
    wrong = choose_gains(p, SLOW, features=(1.0,))
    assert wrong.gains == SLOW and wrong.warning is not None and "failed" in wrong.warning


def test_a_predictor_with_ragged_scores_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="scores"):
        GainPredictor((FIXED, SLOW), ((0.0,),), ((1.0,),), FIXED, 0.0)
