"""The conformal PID controller on the acceptance threshold."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator

import pytest

from closedloop import ConfigurationError
from closedloop.control import AdaptiveThreshold, ConformalPID


def _stream(seed: int, n: int, shift: int) -> Iterator[tuple[int, float, bool]]:
    """Confidence uniform on [0, 1]; P(correct | c) = sqrt(c) before ``shift``, c^2 after:
    the model gets worse at every confidence mid-stream."""
    rng = random.Random(seed)
    for t in range(n):
        c = rng.random()
        p = c**0.5 if t < shift else c**2
        yield t, c, rng.random() < p


def test_aci_step_is_gamma_times_error() -> None:
    aci = AdaptiveThreshold(0.1, gamma=0.05, start=0.5)
    assert aci.update(True) == pytest.approx(0.5 + 0.05 * 0.9)
    assert aci.update(False) == pytest.approx(0.5 + 0.05 * 0.9 - 0.05 * 0.1)
    assert aci.steps == 2 and aci.errors == 1 and aci.realised_error == 0.5


def test_errors_raise_and_successes_lower_the_threshold() -> None:
    pid = ConformalPID(0.2, kp=0.1, ki=0.02, kd=0.05)
    before = pid.threshold
    assert pid.update(True) > before
    tau = pid.threshold
    for _ in range(5):
        pid.update(False)
    assert pid.threshold < tau
    assert pid.accepts(pid.threshold) and not pid.accepts(pid.threshold - 1e-9)


def test_proportional_and_derivative_terms() -> None:
    pid = ConformalPID(0.1, kp=0.2, ki=0.0, kd=0.1, start=0.5)
    # e = 0.9, previous e = 0: 0.5 + 0.2*0.9 + 0.1*0.9
    assert pid.update(True) == pytest.approx(0.5 + 0.18 + 0.09)
    # e = -0.1 after 0.9: 0.5 - 0.02 + 0.1*(-1.0)
    assert pid.update(False) == pytest.approx(0.5 - 0.02 - 0.1)


def test_threshold_stays_within_limits() -> None:
    pid = ConformalPID(0.05, kp=0.5, ki=0.5, kd=0.5, limits=(0.2, 0.9))
    for i in range(200):
        tau = pid.update(i % 3 == 0)
        assert 0.2 <= tau <= 0.9


def test_integral_is_clamped_against_windup() -> None:
    clamped = AdaptiveThreshold(0.1, gamma=0.05, start=0.5)
    for _ in range(1000):
        clamped.update(True)
    assert clamped.threshold == 1.0
    # The integral stops at the limit: one success already moves the threshold down.
    assert clamped.state()["integral"] == pytest.approx(0.5 / 0.05)
    assert clamped.update(False) < 1.0
    # Without the clamp the same sum would be 900 and take ~9000 successes to unwind.
    assert clamped.state()["integral"] < 10.0


def test_state_round_trips_through_json() -> None:
    pid = ConformalPID(0.1, kp=0.03, ki=0.02, kd=0.01, start=0.6, limits=(0.1, 0.95))
    for i in range(37):
        pid.update(i % 4 == 0)
    copy = ConformalPID.from_state(json.loads(json.dumps(pid.state())))
    assert copy.state() == pid.state()
    for i in range(20):
        assert copy.update(i % 5 == 0) == pid.update(i % 5 == 0)


def test_from_state_names_what_is_wrong() -> None:
    state = ConformalPID(0.1).state()
    del state["integral"]
    with pytest.raises(ConfigurationError, match="missing integral"):
        ConformalPID.from_state(state)
    bad = ConformalPID(0.1).state() | {"steps": 1, "errors": 2}
    with pytest.raises(ConfigurationError, match="errors=2"):
        ConformalPID.from_state(bad)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: ConformalPID(1.5), "alpha=1.5"),
        (lambda: ConformalPID(0.1, ki=-1.0), "ki=-1.0"),
        (lambda: ConformalPID(0.1, start=0.1, limits=(0.2, 0.9)), "start=0.1"),
        (lambda: ConformalPID(0.1, limits=(0.9, 0.2)), "limits"),
    ],
)
def test_bad_settings(make: object, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        make()  # type: ignore[operator]


def test_update_wants_a_bool() -> None:
    with pytest.raises(ConfigurationError, match="err=1"):
        ConformalPID(0.1).update(1)  # type: ignore[arg-type]


def test_mean_error_bound_where_the_clamp_does_not_bind() -> None:
    # Gibbs and Candes: the sum of (err - alpha) is (tau_T - tau_0) / gamma, so bounded.
    aci = AdaptiveThreshold(0.1, gamma=0.02, limits=(0.0, 0.99))
    total = 0.0
    for _, c, ok in _stream(3, 4000, 500):
        if aci.accepts(c):
            aci.update(not ok)
            total += (not ok) - 0.1
            assert abs(total - aci.state()["integral"]) < 1e-9 or aci.threshold in (0.0, 0.99)


@pytest.mark.parametrize(
    "make",
    [
        lambda: AdaptiveThreshold(0.1, gamma=0.02, limits=(0.0, 0.99)),
        lambda: ConformalPID(0.1, kp=0.02, ki=0.02, limits=(0.0, 0.99)),
    ],
)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_holds_alpha_across_a_shift_where_a_fixed_threshold_misses(make: object, seed: int) -> None:
    pid: ConformalPID = make()  # type: ignore[operator]
    fixed = 0.63  # about right for alpha = 0.1 before the shift (sqrt(c) model)
    before_fixed: list[bool] = []
    late: list[bool] = []
    late_fixed: list[bool] = []
    for t, c, ok in _stream(seed, 10_000, 500):
        if c >= fixed:
            (before_fixed if t < 500 else late_fixed if t >= 2000 else []).append(not ok)
        if pid.accepts(c):
            pid.update(not ok)
            if t >= 2000:
                late.append(not ok)
    assert abs(sum(before_fixed) / len(before_fixed) - 0.1) < 0.06
    assert sum(late_fixed) / len(late_fixed) - 0.1 > 0.10  # the fixed threshold misses
    assert len(late) > 300
    assert abs(sum(late) / len(late) - 0.1) < 0.03
