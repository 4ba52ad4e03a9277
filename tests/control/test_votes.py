"""Stop rules for sampling votes and the votes themselves (pure numerics)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from closedloop import ConfigurationError
from closedloop.control import (
    BetaStop,
    ConfidenceStop,
    FixedVotes,
    StopRule,
    WindowStop,
    beta_superiority,
    plurality,
    weighted_vote,
)


@pytest.mark.parametrize("a", range(0, 8))
def test_beta_superiority_unanimous_closed_form(a: int) -> None:
    # Beta(a + 1, 1) has CDF x^(a+1), so P(X > 1/2) = 1 - 2^-(a+1).
    assert beta_superiority(a, 0) == pytest.approx(1.0 - 0.5 ** (a + 1), abs=1e-15)


@pytest.mark.parametrize(("a", "b"), [(1, 1), (2, 1), (3, 1), (4, 2), (5, 3), (2, 5), (7, 0)])
def test_beta_superiority_matches_monte_carlo(a: int, b: int) -> None:
    rng = np.random.default_rng(1234 + 10 * a + b)
    draws = rng.beta(a + 1, b + 1, size=400_000)
    estimate = float(np.mean(draws > 0.5))
    # Four standard errors of a proportion over 400k draws is under 0.0032.
    assert beta_superiority(a, b) == pytest.approx(estimate, abs=0.0035)


def test_beta_superiority_symmetry_and_numeric_integral() -> None:
    for a in range(6):
        for b in range(6):
            assert beta_superiority(a, b) + beta_superiority(b, a) == pytest.approx(1.0)
            # Midpoint rule on x^a (1 - x)^b: the ratio of the integrals over [1/2, 1] and [0, 1].
            n = 20_000
            xs = [(i + 0.5) / n for i in range(n)]
            f = [x**a * (1 - x) ** b for x in xs]
            upper = sum(v for x, v in zip(xs, f, strict=True) if x > 0.5)
            assert beta_superiority(a, b) == pytest.approx(upper / sum(f), abs=1e-6)


def test_beta_superiority_rejects_bad_counts() -> None:
    with pytest.raises(ConfigurationError, match="a=-1"):
        beta_superiority(-1, 0)
    with pytest.raises(ConfigurationError, match=r"b=1\.5"):
        beta_superiority(1, 1.5)  # type: ignore[arg-type]


def test_beta_stop_needs_four_agreeing_at_095() -> None:
    rule = BetaStop(threshold=0.95, max_samples=5)
    assert not rule.should_stop(["a"])
    assert not rule.should_stop(["a", "a", "a"])  # 0.9375
    assert rule.should_stop(["a", "a", "a", "a"])  # 0.96875
    assert not rule.should_stop(["a", "b", "a", "a"])
    assert rule.should_stop(["a", "b", "a", "a", "b"])  # the budget
    # Invalid samples vote for nothing, but count toward the budget.
    assert not rule.should_stop(["a", None, None, "a"])
    assert rule.should_stop([None] * 5)
    assert not rule.should_stop([None] * 4)


def test_beta_stop_lower_threshold_stops_on_first_agreeing_pair() -> None:
    rule = BetaStop(threshold=0.85, max_samples=5)
    assert not rule.should_stop(["x"])
    assert rule.should_stop(["x", "x"])
    assert BetaStop(threshold=0.7, min_samples=2).should_stop(["x"]) is False


def test_window_stop() -> None:
    rule = WindowStop(window=2, max_samples=5)
    assert not rule.should_stop(["a"])
    assert rule.should_stop(["a", "a"])
    assert not rule.should_stop(["a", "b"])
    assert rule.should_stop(["a", "b", "b"])
    assert not rule.should_stop(["a", None, None])  # an agreeing pair of failures is no call
    assert rule.should_stop(["a", "b", "a", "b", "c"])
    assert WindowStop(window=1).should_stop(["z"])


def test_confidence_stop_reads_only_the_first_sample() -> None:
    rule = ConfidenceStop(threshold=0.8, max_samples=3)
    assert rule.should_stop(["a"], [0.9])
    assert not rule.should_stop(["a"], [0.7])
    assert not rule.should_stop(["a"])  # no confidence: never early
    assert not rule.should_stop(["a"], [None])
    assert not rule.should_stop([None], [0.99])  # an invalid sample is not a confident call
    assert not rule.should_stop(["a", "a"], [0.5, 0.99])
    assert rule.should_stop(["a", "b", "c"], [0.1, 0.1, 0.1])


def test_confidence_stop_can_trust_a_sample_with_no_reading() -> None:
    rule = ConfidenceStop(threshold=0.8, max_samples=3, when_unknown="stop")
    assert rule.should_stop(["a"]) and rule.should_stop(["a"], [None])
    assert not rule.should_stop(["a"], [0.7])  # a reading below the threshold still draws
    assert not rule.should_stop([None])  # an invalid sample still draws
    with pytest.raises(ConfigurationError, match="when_unknown"):
        ConfidenceStop(when_unknown="ask")  # type: ignore[arg-type]


def test_fixed_votes_and_protocol() -> None:
    rule = FixedVotes(k=3)
    assert [rule.should_stop(["a"] * n) for n in range(1, 5)] == [False, False, True, True]
    assert rule.max_samples == 3
    for r in (rule, BetaStop(), WindowStop(), ConfidenceStop()):
        assert isinstance(r, StopRule)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: BetaStop(threshold=1.5), r"threshold=1\.5"),
        (lambda: BetaStop(max_samples=0), "max_samples=0"),
        (lambda: BetaStop(min_samples=6, max_samples=5), "min_samples=6"),
        (lambda: WindowStop(window=0), "window=0"),
        (lambda: ConfidenceStop(threshold=math.nan), "threshold=nan"),
        (lambda: FixedVotes(k=0), "k=0"),
    ],
)
def test_bad_settings_name_the_argument(make: object, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        make()  # type: ignore[operator]


def test_rules_are_frozen() -> None:
    rule = BetaStop()
    with pytest.raises(AttributeError):
        rule.threshold = 0.5  # type: ignore[misc]


def test_a_string_is_not_a_key_sequence() -> None:
    with pytest.raises(ConfigurationError, match="keys"):
        WindowStop().should_stop("aa")


def test_plurality_ties_to_the_earliest() -> None:
    assert plurality(["b", "a", "a", "b"]) == ("b", 0.5)
    assert plurality(["a", "b", "b"]) == pytest.approx(("b", 2 / 3))
    assert plurality([None, "c", None]) == pytest.approx(("c", 1 / 3))
    assert plurality([None, None]) == (None, 0.0)
    with pytest.raises(ConfigurationError, match="at least one sample"):
        plurality([])


def test_weighted_vote() -> None:
    # Two unsure samples lose to one confident one: the point of weighting.
    key, share = weighted_vote(["a", "a", "b"], [0.2, 0.2, 0.9])
    assert key == "b"
    assert share == pytest.approx(0.9 / 1.3)
    # A tie in weight goes to the key drawn first.
    assert weighted_vote(["b", "a"], [0.5, 0.5])[0] == "b"
    # An invalid sample's weight counts in the total, not for any call.
    assert weighted_vote([None, "a"], [0.5, 0.5]) == ("a", 0.5)
    # Missing confidences weigh nothing; with no weight at all it counts heads.
    assert weighted_vote(["a", "b", "b"], [None, None, None]) == pytest.approx(("b", 2 / 3))
    with pytest.raises(ConfigurationError, match="one value per key"):
        weighted_vote(["a"], [0.1, 0.2])
    with pytest.raises(ConfigurationError, match="confidences"):
        weighted_vote(["a"], [1.2])


@settings(max_examples=80, deadline=None)
@given(a=st.integers(0, 60), b=st.integers(0, 60))
def test_beta_superiority_is_a_probability_that_grows_with_the_lead(a: int, b: int) -> None:
    p = beta_superiority(a, b)
    assert 0.0 <= p <= 1.0
    up, down = beta_superiority(a + 1, b), beta_superiority(a, b + 1)
    assert up >= p >= down
    # Strictly, wherever a float can tell the values apart from the bounds (a lead of 53
    # to 0 is within 1e-16 of certain and rounds to 1.0).
    if 1e-9 < p < 1.0 - 1e-9:
        assert up > p > down


@settings(max_examples=80, deadline=None)
@given(keys=st.lists(st.sampled_from(["a", "b", "c", None]), min_size=1, max_size=12))
def test_every_rule_stops_at_its_budget_and_votes_never_crash(keys: list[str | None]) -> None:
    for rule in (BetaStop(max_samples=5), WindowStop(max_samples=5), FixedVotes(k=5)):
        if len(keys) >= 5:
            assert rule.should_stop(keys)
    winner, share = plurality(keys)
    assert 0.0 <= share <= 1.0 and (winner is None) == all(k is None for k in keys)
    weighted, w_share = weighted_vote(keys, [0.5] * len(keys))
    assert 0.0 <= w_share <= 1.0 and (weighted is None) == (winner is None)
