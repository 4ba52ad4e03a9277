"""Conformal control of the rejection level: the threshold read as a quantile of scores."""

from __future__ import annotations

import json
import random

import pytest

from closedloop import ConfigurationError
from closedloop.control import ConformalPID, QuantileThreshold


def test_the_threshold_is_the_level_quantile_of_recent_scores() -> None:
    q = QuantileThreshold(0.1, ki=0.1, start=0.5, window=5)
    assert q.threshold == 0.0  # no distribution yet: everything is accepted
    for c in (0.1, 0.2, 0.3, 0.4, 0.5, 0.9):  # the window keeps the last five
        q.observe(c)
    assert q.level == 0.5
    assert q.threshold == pytest.approx(0.4)
    q.update(True)  # an accepted wrong call: reject a larger share
    assert q.level == pytest.approx(0.5 + 0.1 * 0.9)
    assert q.threshold == pytest.approx(0.4 + 0.36 * (0.5 - 0.4))  # rank 0.59 × 4 = 2.36
    assert q.accepts(0.99) and not q.accepts(0.4)


def test_the_surest_calls_stay_accepted_so_feedback_never_stops() -> None:
    # Every accepted call is wrong: a raw threshold climbs past every score and hears
    # nothing more; the level stops at max_level and keeps accepting the top 5 %.
    raw = ConformalPID(0.1, ki=0.2, start=0.5, limits=(0.0, 0.999))
    level = QuantileThreshold(0.1, ki=0.2, start=0.5, max_level=0.95, window=100)
    rng = random.Random(0)
    raw_heard = level_heard = 0
    for _ in range(400):
        c = rng.uniform(0.0, 0.99)
        if c >= raw.threshold:
            raw.update(True)
            raw_heard += 1
        if level.accepts(c):
            level.update(True)
            level_heard += 1
        level.observe(c)
    assert raw.threshold == pytest.approx(0.999) and raw_heard < 10
    assert level.level == pytest.approx(0.95) and level_heard > 10
    assert 0.85 < level.threshold < 0.99


def test_holds_alpha_where_the_scores_crowd_near_one() -> None:
    # Confidences crowd near 1 (c = 1 - u^4); right with probability c^8. The level
    # moves coverage evenly where a raw step would jump over most of the mass.
    rng = random.Random(1)
    q = QuantileThreshold(0.1, ki=0.02, start=0.5, window=300)
    errs = []
    for t in range(8000):
        c = 1.0 - rng.random() ** 4
        ok = rng.random() < c**8
        if q.accepts(c):
            q.update(not ok)
            if t >= 2000:
                errs.append(not ok)
        q.observe(c)
    assert len(errs) > 500
    assert abs(sum(errs) / len(errs) - 0.1) < 0.02


def test_state_round_trips_and_bad_input_is_named() -> None:
    q = QuantileThreshold(0.2, kp=0.1, ki=0.05, window=3)
    for c in (0.3, 0.6, 0.9, 0.95):
        q.observe(c)
    q.update(False)
    back = QuantileThreshold.from_state(json.loads(json.dumps(q.state())))
    assert back.state() == q.state() and back.threshold == q.threshold
    with pytest.raises(ConfigurationError, match="max_level"):
        QuantileThreshold(0.1, max_level=1.0)
    with pytest.raises(ConfigurationError, match="window"):
        QuantileThreshold(0.1, window=0)
    with pytest.raises(ConfigurationError, match="confidence"):
        q.observe(1.5)
    with pytest.raises(ConfigurationError, match="missing"):
        QuantileThreshold.from_state({"level": q.state()["level"]})
