"""Isotonic calibration of a confidence score: monotone, fitted rates, round trips."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from closedloop import ConfigurationError
from closedloop.perception import IsotonicCalibration


def test_violators_are_pooled_into_their_mean() -> None:
    # 0.1: right, 0.2: wrong (a violation, pooled to 0.5), then 0.3 wrong and 0.9 right
    # pool again: 0.1-0.3 hold one right in three.
    fit = IsotonicCalibration.fit([0.1, 0.2, 0.3, 0.9], [True, False, False, True])
    assert fit.values == pytest.approx((1 / 3, 1.0))
    assert fit.edges == (0.3, 0.9)
    assert fit(0.0) == pytest.approx(1 / 3) and fit(0.25) == pytest.approx(1 / 3)
    assert fit(0.5) == 1.0 and fit(2.0) == 1.0


def test_an_overconfident_score_is_brought_to_its_rate() -> None:
    # Right with probability c**3: the raw score overstates it everywhere inside (0, 1).
    rng = random.Random(0)
    scores = [rng.random() for _ in range(4000)]
    right = [rng.random() < s**3 for s in scores]
    fit = IsotonicCalibration.fit(scores, right)
    for c in (0.3, 0.5, 0.8):
        assert fit(c) == pytest.approx(c**3, abs=0.08)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0.0, 1.0), st.booleans()), min_size=1, max_size=60))
def test_any_fit_is_monotone_within_the_unit_interval_and_round_trips(
    pairs: list[tuple[float, bool]],
) -> None:
    fit = IsotonicCalibration.fit([p for p, _ in pairs], [r for _, r in pairs])
    grid = [i / 50 for i in range(51)]
    mapped = [fit(g) for g in grid]
    assert mapped == sorted(mapped) and all(0.0 <= m <= 1.0 for m in mapped)
    back = IsotonicCalibration.from_state(json.loads(json.dumps(fit.state())))
    assert back == fit


def test_bad_input_is_named() -> None:
    with pytest.raises(ConfigurationError, match="right"):
        IsotonicCalibration.fit([0.1, 0.2], [True])
    with pytest.raises(ConfigurationError, match="finite"):
        IsotonicCalibration.fit([float("nan")], [True])
    with pytest.raises(ConfigurationError, match="non-decreasing"):
        IsotonicCalibration((0.1, 0.2), (0.9, 0.1))
    with pytest.raises(ConfigurationError, match="not a fit"):
        IsotonicCalibration.from_state({"edges": [0.1]})
