"""Wilson intervals and percentiles: known values, edges, and properties."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from closedloop import ConfigurationError
from closedloop_bench.benchmarks import percentile, rate, wilson_interval


def test_known_values() -> None:
    # Worked by hand from the Wilson formula with z = 1.96 (to 4 digits).
    low, high = wilson_interval(8, 10)
    assert (round(low, 4), round(high, 4)) == (0.4902, 0.9433)
    low, high = wilson_interval(1, 2)
    assert (round(low, 4), round(high, 4)) == (0.0945, 0.9055)


def test_edges_are_exact() -> None:
    assert wilson_interval(0, 0) == (0.0, 1.0)
    low, high = wilson_interval(0, 20)
    assert low == 0.0 and 0.15 < high < 0.17
    low, high = wilson_interval(20, 20)
    assert high == 1.0 and 0.83 < low < 0.85


@pytest.mark.parametrize(("k", "n"), [(-1, 3), (4, 3), (1, -2), (True, 3), (1.5, 3)])
def test_bad_counts_name_the_argument(k: object, n: object) -> None:
    with pytest.raises(ConfigurationError, match=r"successes|n"):
        wilson_interval(k, n)  # type: ignore[arg-type]


@given(st.integers(1, 2000).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))))
def test_interval_holds_the_rate_inside_the_unit_interval(kn: tuple[int, int]) -> None:
    k, n = kn
    low, high = wilson_interval(k, n)
    assert 0.0 <= low <= k / n <= high <= 1.0
    r = rate(k, n)
    assert (r.low, r.high, r.value) == (low, high, k / n)


@given(st.floats(0.05, 0.95), st.integers(5, 200))
def test_more_episodes_narrow_the_interval(p: float, n: int) -> None:
    small = wilson_interval(round(p * n), n)
    large = wilson_interval(round(p * 4 * n), 4 * n)
    assert large[1] - large[0] < small[1] - small[0]


@given(st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=50), st.floats(0, 100))
def test_percentile_lies_between_min_and_max_and_grows_with_q(
    values: list[float], q: float
) -> None:
    got = percentile(values, q)
    assert got is not None
    assert min(values) - 1e-6 <= got <= max(values) + 1e-6
    higher = percentile(values, min(100.0, q + 10))
    assert higher is not None and higher >= got - 1e-6
    assert percentile(values, 0) == min(values) and percentile(values, 100) == max(values)


def test_percentile_interpolates_and_rejects_bad_q() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([], 50) is None
    for q in (-1.0, 101.0, math.nan):
        with pytest.raises(ConfigurationError, match="q"):
            percentile([1.0], q)
