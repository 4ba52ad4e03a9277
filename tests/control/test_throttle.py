"""Client-side throttling, retry budget and Retry-After on an explicit clock."""

from __future__ import annotations

import pytest

from closedloop._exceptions import ConfigurationError
from closedloop.control import (
    ClientThrottle,
    Cooldown,
    RetryBudget,
    RetryBudgetConfig,
    ThrottleConfig,
)


def test_sre_formula_with_k_2() -> None:
    th = ClientThrottle(ThrottleConfig(k=2.0, window_s=60))
    for i in range(10):
        th.record(float(i), accepted=i < 2)
    # requests 10, accepts 2: (10 - 4) / 11
    assert th.reject_probability(10.0) == pytest.approx(6 / 11)
    assert th.should_reject(10.0, 0.5) and not th.should_reject(10.0, 0.6)


def test_no_rejection_while_accepts_keep_up() -> None:
    th = ClientThrottle()
    for i in range(10):
        th.record(float(i), accepted=i % 2 == 0)
    assert th.reject_probability(10.0) == 0.0


def test_old_requests_leave_the_window() -> None:
    th = ClientThrottle(ThrottleConfig(window_s=5))
    for i in range(5):
        th.record(float(i), accepted=False)
    assert th.reject_probability(4.0) > 0.5
    assert th.reject_probability(20.0) == 0.0


def test_retry_budget_spends_and_refills() -> None:
    budget = RetryBudget(RetryBudgetConfig(ratio=0.5, min_per_s=0.0, cap=2.0))
    assert budget.try_retry(0.0) and budget.try_retry(0.0)
    assert not budget.try_retry(0.0)
    budget.on_first_attempt(0.0)
    budget.on_first_attempt(0.0)
    assert budget.try_retry(0.0)


def test_retry_budget_floor_refills_with_time() -> None:
    budget = RetryBudget(RetryBudgetConfig(ratio=0.0, min_per_s=1.0, cap=1.0))
    assert budget.try_retry(0.0) and not budget.try_retry(0.5)
    assert budget.try_retry(1.0)


def test_cooldown_keeps_the_latest_retry_after() -> None:
    cd = Cooldown()
    cd.honour(10.0, 5.0)
    cd.honour(11.0, 1.0)
    assert cd.wait_s(12.0) == pytest.approx(3.0)
    assert cd.wait_s(20.0) == 0.0


def test_bad_k_is_refused_by_name() -> None:
    with pytest.raises(ConfigurationError, match="k="):
        ThrottleConfig(k=0.5)


def test_a_quiet_client_is_not_throttled_below_the_minimum() -> None:
    throttle = ClientThrottle(ThrottleConfig(min_requests=3))
    for t in (0.0, 1.0):
        throttle.record(t, accepted=False)
    assert throttle.reject_probability(1.0) == 0.0
    throttle.record(2.0, accepted=False)
    assert throttle.reject_probability(2.0) == pytest.approx(3 / 4)
    with pytest.raises(ConfigurationError, match="min_requests"):
        ThrottleConfig(min_requests=-1)
