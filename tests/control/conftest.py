"""Fixtures for the control kernel tests."""

from __future__ import annotations

import pytest

# --- pid (helper: pid) ---


class FakeClock:
    """A hand-driven clock: ``time_fn`` for controllers, advanced only by the test."""

    def __init__(self, start: float = 100.0) -> None:
        self.now = start
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def fake_clock() -> FakeClock:
    """A clock that stands still until the test advances it."""
    return FakeClock()


@pytest.fixture(scope="session")
def fake_clock_type() -> type[FakeClock]:
    """The ``FakeClock`` class, for Hypothesis tests that need a fresh clock per example."""
    return FakeClock
