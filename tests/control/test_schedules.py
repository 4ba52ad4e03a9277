"""Schedules: control signal u to actuator settings."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from closedloop import ConfigurationError
from closedloop.control import (
    ActuatorSchedule,
    ActuatorSettings,
    FeedbackIntensity,
    ScheduleLevels,
    ScheduleLinear,
    Strictness,
    schedule_feedback_intensity,
    schedule_levels,
    schedule_linear,
    schedule_max_retries,
    schedule_retry_delay_ms,
    schedule_rung,
    schedule_strictness,
    schedule_timeout_ms,
    schedule_votes,
)

unit = st.floats(min_value=0.0, max_value=1.0)


@pytest.mark.parametrize(
    ("u", "expected"),
    [
        (0.0, "light"),
        (0.285, "light"),  # the feedback-intensity worked example, u = 0.285
        (0.2999, "light"),
        (0.3, "medium"),
        (0.5999, "medium"),
        (0.6, "heavy"),
        (1.0, "heavy"),
    ],
)
def test_feedback_intensity(u: float, expected: str) -> None:
    assert schedule_feedback_intensity()(u) == expected
    assert schedule_feedback_intensity()(u) is FeedbackIntensity(expected)


def test_strictness() -> None:
    sched = schedule_strictness()
    assert [sched(u) for u in (0.0, 0.42, 0.6999, 0.7, 0.85)] == [
        Strictness.LOOSE,
        Strictness.LOOSE,
        Strictness.LOOSE,
        Strictness.STRICT,
        Strictness.STRICT,
    ]
    assert schedule_strictness(0.5)(0.6) is Strictness.STRICT


def test_retry_delay_and_timeout() -> None:
    delay = schedule_retry_delay_ms()
    timeout = schedule_timeout_ms()
    assert delay(0.0) == 100.0
    assert delay(0.42) == pytest.approx(310.0)  # u = 0.42 → 100 + 500·0.42 = 310 ms
    assert delay(1.0) == 600.0
    assert timeout(0.42) == pytest.approx(620.0)
    assert timeout == ScheduleLinear(200.0, 1000.0)
    assert schedule_timeout_ms(schedule_retry_delay_ms(50.0, 100.0), factor=3.0)(1.0) == 450.0


def test_linear_schedules_compose_by_scaling() -> None:
    base = schedule_linear(offset=10.0, slope=20.0)
    assert base * 2 == 2 * base == ScheduleLinear(20.0, 40.0)
    assert (base * 0.5)(1.0) == 15.0


def test_generic_levels() -> None:
    sched = schedule_levels(("a", "b", "c", "d"), thresholds=(0.25, 0.5, 0.75))
    assert [sched(u) for u in (0.1, 0.25, 0.6, 0.9)] == ["a", "b", "c", "d"]
    assert schedule_max_retries()(0.49) == 0
    assert schedule_max_retries()(0.5) == 1
    assert schedule_max_retries(0.2, below=1, above=3)(0.3) == 3


def test_u_is_clipped_to_the_unit_interval() -> None:
    assert schedule_retry_delay_ms()(-2.0) == 100.0
    assert schedule_retry_delay_ms()(7.0) == 600.0
    assert schedule_feedback_intensity()(-1.0) is FeedbackIntensity.LIGHT
    assert ActuatorSchedule()(1.5).u == 1.0


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_u_is_rejected(bad: float) -> None:
    for sched in (schedule_retry_delay_ms(), schedule_strictness(), ActuatorSchedule()):
        with pytest.raises(ConfigurationError) as info:
            sched(bad)
        assert info.value.argument == "u"


@pytest.mark.parametrize(
    ("levels", "thresholds", "argument"),
    [
        (("a", "b", "c"), (0.6, 0.3), "thresholds"),
        (("a", "b", "c"), (0.3, 0.3), "thresholds"),
        (("a", "b"), (1.5,), "thresholds[0]"),
        (("a", "b"), (math.nan,), "thresholds[0]"),
        (("a", "b"), (0.2, 0.4), "levels"),
        (("a",), (0.5,), "levels"),
    ],
)
def test_bad_level_schedules(
    levels: tuple[str, ...], thresholds: tuple[float, ...], argument: str
) -> None:
    with pytest.raises(ConfigurationError) as info:
        schedule_levels(levels, thresholds)
    assert info.value.argument == argument


def test_bad_named_schedules() -> None:
    with pytest.raises(ConfigurationError, match="thresholds"):
        schedule_feedback_intensity((0.7, 0.2))
    with pytest.raises(ConfigurationError, match="thresholds"):
        schedule_strictness(1.2)
    with pytest.raises(ConfigurationError, match="slope"):
        schedule_linear(slope=math.inf)
    with pytest.raises(ConfigurationError, match="factor"):
        schedule_timeout_ms(factor=math.nan)


def test_actuator_schedule_combines_every_actuator() -> None:
    settings = ActuatorSchedule()(0.65)
    assert settings == ActuatorSettings(
        u=0.65,
        feedback_intensity=FeedbackIntensity.HEAVY,
        strictness=Strictness.LOOSE,
        retry_delay_ms=pytest.approx(425.0),  # type: ignore[arg-type]
        timeout_ms=pytest.approx(850.0),  # type: ignore[arg-type]
        max_retries=1,
        rung=1,
        votes=1,
    )
    record = settings.as_dict()
    assert json.loads(json.dumps(record)) == record
    assert record["feedback_intensity"] == "heavy"
    assert type(record["strictness"]) is str


@pytest.mark.parametrize(
    ("u", "rung", "votes"), [(0.0, 0, 1), (0.49, 0, 1), (0.5, 1, 1), (0.85, 2, 1), (0.95, 2, 3)]
)
def test_rung_and_votes_climb_with_u(u: float, rung: int, votes: int) -> None:
    settings = ActuatorSchedule(votes=schedule_votes())(u)
    assert (settings.rung, settings.votes) == (rung, votes)
    assert ActuatorSchedule()(u).votes == 1  # votes are asked for, not on by default
    assert schedule_rung((0.3,))(0.4) == 1 and schedule_rung(())(1.0) == 0
    assert schedule_votes(0.5, 1, 5)(0.6) == 5


def test_a_vote_count_below_one_is_refused_by_name() -> None:
    with pytest.raises(ConfigurationError, match=r"above=0: a vote count"):
        schedule_votes(above=0)
    with pytest.raises(ConfigurationError, match=r"below=-1"):
        schedule_votes(below=-1)
    base = ActuatorSchedule()(0.0)
    with pytest.raises(ConfigurationError, match=r"votes=0"):
        dataclasses.replace(base, votes=0)
    with pytest.raises(ConfigurationError, match=r"rung=-1"):
        dataclasses.replace(base, rung=-1)


def test_actuator_schedule_parts_can_be_swapped() -> None:
    sched = ActuatorSchedule(
        strictness=schedule_strictness(0.5),
        retry_delay_ms=schedule_linear(offset=0.0, slope=1000.0),
    )
    settings = sched(0.55)
    assert settings.strictness is Strictness.STRICT
    assert settings.retry_delay_ms == pytest.approx(550.0)
    assert settings.timeout_ms == pytest.approx(750.0)  # the default timeout is unchanged


def test_schedules_are_frozen_values() -> None:
    sched = schedule_feedback_intensity()
    with pytest.raises(dataclasses.FrozenInstanceError):
        sched.thresholds = (0.1, 0.2)  # type: ignore[misc]
    assert sched == ScheduleLevels(tuple(FeedbackIntensity), (0.3, 0.6))
    assert "0.3" in repr(sched)
    with pytest.raises(dataclasses.FrozenInstanceError):
        ActuatorSchedule()(0.1).u = 0.2  # type: ignore[misc]


@given(unit, unit)
def test_level_schedules_are_monotone(a: float, b: float) -> None:
    lo, hi = sorted((a, b))
    order = list(FeedbackIntensity)
    sched = schedule_feedback_intensity()
    assert order.index(sched(lo)) <= order.index(sched(hi))
    assert ActuatorSchedule()(lo).retry_delay_ms <= ActuatorSchedule()(hi).retry_delay_ms


@given(unit)
def test_timeout_is_twice_the_delay(u: float) -> None:
    settings = ActuatorSchedule()(u)
    assert settings.timeout_ms == pytest.approx(2.0 * settings.retry_delay_ms)
    assert 100.0 <= settings.retry_delay_ms <= 600.0
