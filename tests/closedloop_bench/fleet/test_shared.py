"""Two workers sharing one limiter through a real Redis, against one, on the loopback plant."""

from __future__ import annotations

import pytest

from closedloop_bench.fleet._shared import run_shared

pytestmark = [pytest.mark.real_model, pytest.mark.integration]


def test_both_arms_run_the_real_client_stack_and_are_compared(redis_url: str) -> None:
    report = run_shared((10,), clients=8, duration_s=24.0, time_scale=4.0, redis_url=redis_url)
    row = report["rows"][0]
    for arm in ("one_worker", "two_workers"):
        assert row[arm]["successes"] > 0 and row[arm]["attempts"] >= row[arm]["successes"]
    one, two = report["one_worker_goodput"], report["two_workers_goodput"]
    assert report["relative_difference"] == pytest.approx((two - one) / one, abs=1e-3)
