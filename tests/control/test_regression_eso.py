"""RegressionESO: the sliding-window disturbance estimator (ADRC's ESO, Han 2009)."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from closedloop import ConfigurationError
from closedloop.control import RegressionESO

Triple = tuple[float, float, float]


def reference_estimate(samples: list[Triple], gain: float = 0.2) -> float:
    """The disturbance level written out: weights 1..n on d = clip((w − q) + gain·v)."""
    ds = [min(1.0, max(0.0, (w - q) + gain * v)) for v, w, q in samples]
    weights = np.arange(1, len(ds) + 1, dtype=float)
    return float(min(1.0, max(0.0, np.dot(weights, ds) / weights.sum())))


def reference_fit(samples: list[Triple]) -> tuple[np.ndarray, float]:
    """numpy's minimum-norm least squares of q on (v, w, 1), and the estimate."""
    data = np.array(samples, dtype=float)
    x = np.column_stack([data[:, 0], data[:, 1], np.ones(len(data))])
    coef = np.linalg.lstsq(x, data[:, 2], rcond=None)[0]
    return coef, reference_estimate(samples)


def feed(eso: RegressionESO, samples: list[Triple]) -> list[float]:
    return [eso.update(*s) for s in samples]


unit = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
# Few distinct values make constant columns and collinear v, w common.
coarse = st.sampled_from([0.0, 0.25, 0.5, 1.0])
triples = st.tuples(unit | coarse, unit | coarse, unit | coarse)


def test_zero_until_min_samples() -> None:
    eso = RegressionESO(window=15, min_samples=5)
    out = feed(eso, [(0.5, 0.8, 0.2 + 0.1 * k) for k in range(4)])
    assert out == [0.0] * 4
    assert eso.coefficients is None
    assert eso.update(0.9, 0.8, 0.1) > 0.0
    assert eso.coefficients is not None


def test_recovers_an_exact_linear_model() -> None:
    a, b, c = 0.3, 0.5, 0.1
    points = [(0.4, 0.2), (0.8, 0.5), (0.3, 0.7), (0.6, 0.1), (0.2, 0.3), (0.1, 0.9)]
    samples = [(v, w, a * v + b * w + c) for v, w in points]
    eso = RegressionESO(window=15, min_samples=5)
    f = feed(eso, samples)[-1]
    assert eso.coefficients == pytest.approx((a, b, c), abs=1e-12)
    # The fit describes the agent; the estimate is the disturbance level, not w − q̂.
    assert f == pytest.approx(reference_estimate(samples), abs=1e-12)


def test_a_shortfall_shows_as_a_disturbance() -> None:
    # Quality falls behind a constant setpoint while the controller pushes harder.
    eso = RegressionESO()
    samples = [(0.2 + 0.05 * k, 0.9, 0.85 - 0.05 * k) for k in range(10)]
    f = feed(eso, samples)
    assert f[-1] == pytest.approx(reference_estimate(samples), abs=1e-12)
    assert f[4:] == sorted(f[4:])  # growing with the shortfall
    assert f[-1] > f[4]


def test_constant_window_gives_the_minimum_norm_fit() -> None:
    eso = RegressionESO(window=8, min_samples=5)
    qs = [0.2, 0.4, 0.3, 0.5, 0.1, 0.3]
    samples = [(0.5, 0.8, q) for q in qs]
    f = feed(eso, samples)[-1]
    coef, expected = reference_fit(samples)
    assert eso.coefficients == pytest.approx(tuple(coef), abs=1e-12)
    # All rows equal: the fit is the mean quality; min-norm spreads it along (v, w, 1).
    mean = sum(qs) / len(qs)
    assert eso.coefficients == pytest.approx(
        tuple(x * mean / (0.5**2 + 0.8**2 + 1) for x in (0.5, 0.8, 1.0)), abs=1e-12
    )
    assert f == pytest.approx(expected, abs=1e-12)
    # Constant effort: the level is the weighted shortfall plus the effort's share.
    weights = range(1, len(qs) + 1)
    weighted = sum(k * (0.8 - q) for k, q in zip(weights, qs, strict=True)) / sum(weights)
    assert f == pytest.approx(weighted + 0.2 * 0.5, abs=1e-12)


def test_all_zero_window_does_not_crash() -> None:
    eso = RegressionESO(window=5, min_samples=5)
    assert feed(eso, [(0.0, 0.0, 0.0)] * 7)[-1] == 0.0
    assert eso.coefficients == (0.0, 0.0, 0.0)


def test_collinear_control_and_setpoint() -> None:
    eso = RegressionESO()
    samples = [(x, x, 0.5 * x + 0.2) for x in (0.1, 0.3, 0.5, 0.7, 0.9, 0.2)]
    f = feed(eso, samples)[-1]
    coef, expected = reference_fit(samples)
    # Min-norm splits the shared slope evenly between v and w.
    assert eso.coefficients == pytest.approx((0.25, 0.25, 0.2), abs=1e-12)
    assert eso.coefficients == pytest.approx(tuple(coef), abs=1e-12)
    assert f == pytest.approx(expected, abs=1e-12)


def test_window_slides() -> None:
    samples = [(0.1 * (k % 7), 0.05 * (k % 5), 0.5 + 0.03 * (k % 3)) for k in range(30)]
    long = RegressionESO(window=10, min_samples=5)
    feed(long, samples)
    short = RegressionESO(window=10, min_samples=5)
    feed(short, samples[-10:])
    assert long.samples == tuple(samples[-10:])
    assert long.coefficients == short.coefficients
    assert long.f_est == short.f_est


def test_reset() -> None:
    eso = RegressionESO(window=6, min_samples=5)
    feed(eso, [(0.1 * k, 0.5, 0.2) for k in range(6)])
    eso.reset()
    assert eso.samples == ()
    assert eso.coefficients is None
    assert eso.f_est == 0.0


@given(st.lists(triples, min_size=5, max_size=40), st.integers(5, 15))
def test_matches_numpy_minimum_norm_least_squares(samples: list[Triple], window: int) -> None:
    eso = RegressionESO(window=window, min_samples=5)
    f = feed(eso, samples)[-1]
    coef, expected = reference_fit(samples[-window:])
    assert eso.coefficients is not None
    scale = 1.0 + float(np.max(np.abs(coef)))
    assert np.allclose(eso.coefficients, coef, rtol=1e-6, atol=1e-7 * scale)
    assert f == pytest.approx(expected, abs=1e-7 * scale)


any_finite = st.floats(allow_nan=False, allow_infinity=False)


@given(st.lists(st.tuples(any_finite, any_finite, any_finite), min_size=1, max_size=30))
def test_f_est_is_in_the_unit_interval_for_any_finite_input(samples: list[Triple]) -> None:
    eso = RegressionESO(window=15, min_samples=3)
    for s in samples:
        f = eso.update(*s)
        assert 0.0 <= f <= 1.0
        assert f == eso.f_est


@given(st.lists(triples, min_size=0, max_size=20))
def test_state_round_trips_through_json(samples: list[Triple]) -> None:
    eso = RegressionESO(window=12, min_samples=4)
    feed(eso, samples)
    restored = RegressionESO.from_state(json.loads(json.dumps(eso.state())))
    assert restored.samples == eso.samples
    assert restored.f_est == eso.f_est
    assert restored.coefficients == eso.coefficients
    assert (restored.window, restored.min_samples, restored.input_gain) == (12, 4, 0.2)
    nxt = (0.3, 0.7, 0.4)
    assert restored.update(*nxt) == eso.update(*nxt)


def test_state_is_plain_json() -> None:
    eso = RegressionESO(window=6, min_samples=5)
    feed(eso, [(0.1, 0.2, 0.3)])
    assert eso.state() == {
        "window": 6,
        "min_samples": 5,
        "input_gain": 0.2,
        "samples": [[0.1, 0.2, 0.3]],
    }


def test_a_snapshot_without_a_gain_takes_the_default() -> None:
    state = {"window": 6, "min_samples": 1, "samples": [[0.5, 1.0, 0.0]]}
    eso = RegressionESO.from_state(state)
    assert eso.input_gain == 0.2
    assert eso.f_est == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("state", "argument"),
    [
        ({"window": 5}, "state"),
        ("not a mapping", "state"),
        ({"window": 4, "min_samples": 5, "samples": []}, "window"),
        ({"window": 5, "min_samples": 5, "samples": 3}, "state['samples']"),
        ({"window": 5, "min_samples": 5, "samples": [[0.1, 0.2]]}, "state['samples'][0]"),
        ({"window": 5, "min_samples": 5, "samples": [[0.1, 0.2, math.nan]]}, "state['samples'][0]"),
        ({"window": 2, "min_samples": 1, "samples": [[0, 0, 0]] * 3}, "state['samples']"),
    ],
)
def test_from_state_rejects_bad_state(state: object, argument: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        RegressionESO.from_state(state)  # type: ignore[arg-type]
    assert info.value.argument == argument


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"window": 4, "min_samples": 5}, "window"),
        ({"min_samples": 0}, "min_samples"),
        ({"window": 2.5}, "window"),
        ({"window": True}, "window"),
        ({"input_gain": -0.1}, "input_gain"),
        ({"input_gain": math.nan}, "input_gain"),
    ],
)
def test_rejects_bad_settings(kwargs: dict[str, object], argument: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        RegressionESO(**kwargs)  # type: ignore[arg-type]
    assert info.value.argument == argument


@pytest.mark.parametrize(
    ("sample", "argument"),
    [
        ((math.nan, 0.5, 0.5), "control"),
        ((0.5, math.inf, 0.5), "setpoint"),
        ((0.5, 0.5, -math.inf), "quality"),
    ],
)
def test_rejects_non_finite_samples(sample: Triple, argument: str) -> None:
    eso = RegressionESO()
    with pytest.raises(ConfigurationError) as info:
        eso.update(*sample)
    assert info.value.argument == argument
    assert eso.samples == ()  # a rejected sample leaves no trace


# --- the sign: falling quality must read as a rising disturbance ------------------------


def pid_like_effort(qualities: list[float]) -> list[Triple]:
    """(v, w, q) as the loop feeds them: the effort of a step answers the previous error."""
    out: list[Triple] = []
    v = 0.0
    for q in qualities:
        out.append((v, 1.0, q))
        v = min(1.0, 0.8 * (1.0 - q) + 0.3 * max(0.0, (out[-2][2] if len(out) > 1 else 1.0) - q))
    return out


def test_collapsing_quality_gives_a_rising_estimate() -> None:
    qualities = [1.0] * 6 + [0.8, 0.6, 0.4, 0.2] + [0.0] * 8
    samples = pid_like_effort(qualities)
    f = feed(RegressionESO(), samples)
    live = f[5:]
    assert all(b > a for a, b in itertools.pairwise(live[:-1])), live
    assert f[-1] >= 0.8


def test_a_failed_step_after_more_effort_does_not_lower_the_estimate() -> None:
    # The old reading f = w − q̂ fell from 0.62 to 0.36 here: the fit had learnt that
    # effort brings quality, so q = 0 under high effort read as a smaller disturbance.
    samples = [(0.0, 1.0, 1.0), (0.0, 1.0, 0.0), (1.0, 1.0, 1.0), (0.0, 1.0, 0.0)]
    samples += [(1.0, 1.0, 1.0), (0.2, 1.0, 0.0), (1.0, 1.0, 0.0)]
    f = feed(RegressionESO(window=15, min_samples=5), samples)
    assert f[-1] > f[-2] > 0.0


@given(st.lists(triples, min_size=1, max_size=20), unit, unit, st.floats(0.0, 0.5))
def test_lower_quality_or_more_effort_never_lowers_the_estimate(
    history: list[Triple], v: float, q: float, drop: float
) -> None:
    base = RegressionESO(window=15, min_samples=1)
    feed(base, history)
    worse_q = RegressionESO.from_state(base.state())
    more_v = RegressionESO.from_state(base.state())
    f = base.update(v, 1.0, q)
    assert worse_q.update(v, 1.0, max(0.0, q - drop)) >= f
    assert more_v.update(min(1.0, v + drop), 1.0, q) >= f


@given(
    st.lists(unit, min_size=2, max_size=30),
    st.lists(unit, min_size=30, max_size=30),
    st.integers(1, 15),
)
def test_falling_quality_under_rising_effort_gives_a_non_decreasing_estimate(
    qualities: list[float], efforts: list[float], window: int
) -> None:
    qs = sorted(qualities, reverse=True)
    vs = sorted(efforts)[: len(qs)]
    eso = RegressionESO(window=window, min_samples=1)
    f = feed(eso, [(v, 1.0, q) for v, q in zip(vs, qs, strict=True)])
    assert all(b >= a - 1e-12 for a, b in itertools.pairwise(f))


def _calm_decline_failure(calm: int, decline: int, failure: int) -> list[tuple[float, float]]:
    """(u, q): a calm spell (q = 1 at u = 0), a decline (q falls as the controller pushes
    u up) and a failure that lasts with the control saturated (q = 0 at u = 1)."""
    ramp = [(k / decline, 1.0 - k / decline) for k in range(1, decline + 1)]
    return [(0.0, 1.0)] * calm + ramp + [(1.0, 0.0)] * failure


@pytest.mark.parametrize("setpoint", [0.6, 0.8, 1.0])
@pytest.mark.parametrize("window", [5, 15, 30])
def test_a_lasting_failure_under_saturated_control_does_not_fade(
    setpoint: float, window: int
) -> None:
    # u and q are collinear over the whole failure (u = 1, q = 0 at every step): a fit
    # that read f off q's regression on u would hand the failure to the control input
    # and let the estimate fall back. The estimate must hold while the failure lasts.
    eso = RegressionESO(window=window, min_samples=min(5, window))
    sequence = _calm_decline_failure(calm=10, decline=5, failure=3 * window)
    estimates = [eso.update(u, setpoint, q) for u, q in sequence]
    failure = estimates[15:]
    assert all(b >= a for a, b in itertools.pairwise(failure))  # never falls back
    held = min(1.0, setpoint + eso.input_gain)  # the failure's own disturbance
    assert failure[-1] == pytest.approx(held)
    assert failure[-1] >= max(estimates[:15])  # ends at least at the decline's peak
    assert estimates[9] == 0.0  # the calm spell reads no disturbance


# --- the O(1) update against the batch fit it replaced -------------------------------------


def batch_f_est(window: list[Triple], gain: float, min_samples: int) -> float:
    """The old refit: the recency-weighted level of d summed over the whole window."""
    if len(window) < min_samples:
        return 0.0
    eso = RegressionESO(window=len(window), min_samples=1, input_gain=gain)
    ds = [eso._disturbance(s) for s in window]
    total = sum(k * d for k, d in enumerate(ds, start=1))
    n = len(window)
    return min(1.0, max(0.0, 2.0 * total / (n * (n + 1))))


@given(
    stream=st.lists(st.tuples(unit, unit, unit), min_size=1, max_size=120),
    window=st.integers(1, 20),
    gain=st.floats(0.0, 1.0),
)
def test_the_running_sums_match_the_batch_fit_on_random_streams(
    stream: list[Triple], window: int, gain: float
) -> None:
    min_samples = min(window, 3)
    eso = RegressionESO(window=window, min_samples=min_samples, input_gain=gain)
    for i, sample in enumerate(stream):
        got = eso.update(*sample)
        kept = stream[max(0, i + 1 - window) : i + 1]
        assert got == pytest.approx(batch_f_est(kept, gain, min_samples), abs=1e-15)
    kept = stream[-window:]
    if len(kept) >= min_samples:
        expected, _ = reference_fit(kept)
        assert eso.coefficients is not None
        assert np.allclose(eso.coefficients, expected, atol=1e-6)


def test_rounding_does_not_build_up_over_a_long_run() -> None:
    rng = np.random.default_rng(7)
    eso = RegressionESO(window=15, min_samples=5)
    stream = [tuple(float(x) for x in rng.random(3)) for _ in range(20_000)]
    for sample in stream:
        eso.update(*sample)
    assert eso.f_est == pytest.approx(batch_f_est(stream[-15:], 0.2, 5), abs=1e-15)
    # The restored estimator sums its window afresh and holds the same sums, to the bit.
    restored = RegressionESO.from_state(eso.state())
    assert restored.f_est == eso.f_est
    assert restored.update(0.5, 0.9, 0.1) == eso.update(0.5, 0.9, 0.1)
