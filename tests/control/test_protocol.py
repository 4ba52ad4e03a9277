"""Protocol selection from f_est: thresholds, hysteresis and a minimum dwell."""

from __future__ import annotations

import itertools
import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from closedloop import ConfigurationError
from closedloop.control import Protocol, ProtocolSelector, select_protocol

P = Protocol


@pytest.mark.parametrize(
    ("f_est", "expected"),
    [
        (0.0, P.NORMAL),
        (0.39, P.NORMAL),
        (0.4, P.DUAL_VERIFICATION),
        (0.59, P.DUAL_VERIFICATION),
        (0.6, P.DIMENSION_REDUCTION),
        (0.79, P.DIMENSION_REDUCTION),
        (0.8, P.MANUAL_HANDOVER),
        (1.0, P.MANUAL_HANDOVER),
        (-0.5, P.NORMAL),
        (3.0, P.MANUAL_HANDOVER),
    ],
)
def test_default_thresholds(f_est: float, expected: Protocol) -> None:
    assert select_protocol(f_est) is expected


def test_custom_thresholds() -> None:
    assert select_protocol(0.35, thresholds=(0.1, 0.2, 0.3)) is P.MANUAL_HANDOVER
    assert select_protocol(0.15, thresholds=[0.1, 0.2, 0.3]) is P.DUAL_VERIFICATION


def test_protocol_levels_and_values() -> None:
    assert [p.level for p in Protocol] == [0, 1, 2, 3]
    assert [p.value for p in Protocol] == [
        "normal",
        "dual_verification",
        "dimension_reduction",
        "manual_handover",
    ]


@pytest.mark.parametrize(
    ("thresholds", "argument"),
    [
        ((0.6, 0.4, 0.8), "thresholds"),
        ((0.4, 0.4, 0.8), "thresholds"),
        ((0.4, 0.6), "thresholds"),
        ((0.4, 0.6, 1.2), "thresholds[2]"),
        ((-0.1, 0.6, 0.8), "thresholds[0]"),
        ((0.4, math.nan, 0.8), "thresholds[1]"),
        (0.5, "thresholds"),
    ],
)
def test_bad_thresholds(thresholds: object, argument: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        select_protocol(0.5, thresholds=thresholds)  # type: ignore[arg-type]
    assert info.value.argument == argument
    with pytest.raises(ConfigurationError) as info:
        ProtocolSelector(thresholds=thresholds)  # type: ignore[arg-type]
    assert info.value.argument == argument


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_non_finite_f_est(bad: float) -> None:
    with pytest.raises(ConfigurationError, match="f_est"):
        select_protocol(bad)
    with pytest.raises(ConfigurationError, match="f_est"):
        ProtocolSelector().select(bad)


@pytest.mark.parametrize("bad", [-0.01, 1.5, math.nan])
def test_bad_hysteresis(bad: float) -> None:
    with pytest.raises(ConfigurationError) as info:
        ProtocolSelector(hysteresis=bad)
    assert info.value.argument == "hysteresis"


HOVER = [0.58, 0.62, 0.59, 0.61, 0.57, 0.63, 0.585, 0.605]


def changes(protocols: list[Protocol]) -> int:
    return sum(1 for a, b in itertools.pairwise(protocols) if a is not b)


def test_without_hysteresis_a_hovering_estimate_flaps() -> None:
    sel = ProtocolSelector(hysteresis=0.0)
    out = [sel.select(f) for f in HOVER]
    assert changes(out) == len(HOVER) - 1


def test_with_hysteresis_the_level_changes_once() -> None:
    sel = ProtocolSelector(hysteresis=0.05)
    out = [sel.select(f) for f in HOVER]
    assert out[0] is P.DUAL_VERIFICATION
    assert out[1:] == [P.DIMENSION_REDUCTION] * (len(HOVER) - 1)
    assert changes(out) == 1
    # It does drop once the estimate is clearly below the band ...
    assert sel.select(0.549) is P.DUAL_VERIFICATION
    # ... and rises at once, without waiting for the band.
    assert sel.select(0.81) is P.MANUAL_HANDOVER
    # A big fall can skip levels.
    assert sel.select(0.1) is P.NORMAL


def test_selector_state_and_reset() -> None:
    sel = ProtocolSelector(hysteresis=0.1)
    assert sel.protocol is P.NORMAL
    sel.select(0.9)
    assert sel.protocol is P.MANUAL_HANDOVER
    sel.reset()
    assert sel.protocol is P.NORMAL
    assert "normal" in repr(sel)


unit = st.floats(min_value=0.0, max_value=1.0)


@given(unit, unit)
def test_selection_is_monotone_in_f_est(a: float, b: float) -> None:
    lo, hi = sorted((a, b))
    assert select_protocol(lo).level <= select_protocol(hi).level


@given(st.lists(unit, max_size=30))
def test_zero_hysteresis_equals_the_pure_function(values: list[float]) -> None:
    sel = ProtocolSelector()
    assert [sel.select(f) for f in values] == [select_protocol(f) for f in values]


@given(st.lists(unit, max_size=30), st.floats(min_value=0.0, max_value=0.15))
def test_hysteresis_stays_within_one_band_of_the_pure_answer(
    values: list[float], hysteresis: float
) -> None:
    sel = ProtocolSelector(hysteresis=hysteresis)
    for f in values:
        got = sel.select(f)
        # Never below the plain answer, never above the answer for f + hysteresis.
        assert (
            select_protocol(f).level <= got.level <= select_protocol(f + hysteresis + 1e-12).level
        )


# --- enter / exit thresholds and a minimum dwell ---------------------------------------


def test_a_dwell_escalates_one_level_at_a_time() -> None:
    sel = ProtocolSelector(hysteresis=0.05, min_dwell=2)
    out = [sel.select(1.0) for _ in range(7)]
    assert [p.level for p in out] == [1, 1, 2, 2, 3, 3, 3]


def test_a_dwell_holds_a_level_before_it_drops() -> None:
    sel = ProtocolSelector(hysteresis=0.05, min_dwell=3)
    assert sel.select(0.45) is P.DUAL_VERIFICATION
    # The estimate falls back at once, the level is held for the dwell.
    assert [sel.select(0.0).level for _ in range(3)] == [1, 1, 0]


def test_a_dwell_of_one_only_forbids_skipping_levels() -> None:
    sel = ProtocolSelector(min_dwell=1)
    assert [sel.select(f).level for f in (0.9, 0.9, 0.9, 0.0, 0.0)] == [1, 2, 3, 2, 1]


def test_explicit_exit_thresholds() -> None:
    sel = ProtocolSelector((0.4, 0.6, 0.8), exit_thresholds=(0.2, 0.5, 0.7))
    assert sel.exit_thresholds == (0.2, 0.5, 0.7)
    assert sel.select(0.45) is P.DUAL_VERIFICATION
    assert sel.select(0.25) is P.DUAL_VERIFICATION  # above the exit threshold: stays
    assert sel.select(0.19) is P.NORMAL


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"min_dwell": -1}, "min_dwell"),
        ({"min_dwell": 1.5}, "min_dwell"),
        ({"exit_thresholds": (0.5, 0.55, 0.7)}, "exit_thresholds[0]"),
        ({"exit_thresholds": (0.3, 0.2, 0.7)}, "exit_thresholds"),
        ({"exit_thresholds": (0.3, 0.5)}, "exit_thresholds"),
        ({"exit_thresholds": (0.3, 0.5, 0.7), "hysteresis": 0.1}, "exit_thresholds"),
    ],
)
def test_bad_dwell_or_exits_name_themselves(kwargs: dict[str, Any], argument: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        ProtocolSelector(**kwargs)
    assert info.value.argument == argument


@given(st.lists(unit, max_size=30), st.integers(1, 4))
def test_with_a_dwell_the_level_never_skips_and_never_changes_early(
    values: list[float], dwell: int
) -> None:
    sel = ProtocolSelector(hysteresis=0.05, min_dwell=dwell)
    levels = [0] + [sel.select(f).level for f in values]
    change_at = [i for i, (a, b) in enumerate(itertools.pairwise(levels)) if a != b]
    assert all(abs(b - a) <= 1 for a, b in itertools.pairwise(levels))
    assert all(b - a >= dwell for a, b in itertools.pairwise(change_at))


def test_a_dwelling_selector_round_trips_through_its_state() -> None:
    sel = ProtocolSelector(hysteresis=0.05, min_dwell=2)
    sel.select(1.0)
    copy = ProtocolSelector.from_state(json.loads(json.dumps(sel.state())))
    assert [copy.select(1.0) for _ in range(4)] == [sel.select(1.0) for _ in range(4)]
    assert copy.min_dwell == 2 and copy.exit_thresholds == sel.exit_thresholds
