"""Fixtures for the integration modes: a manual clock and sleep recorders (nothing sleeps)."""

from __future__ import annotations

import pytest


class FakeClock:
    """A clock that moves only when told to."""

    def __init__(self, start: float = 100.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class SleepRecorder:
    """Records the delays it was asked to wait; usable as a sync or an async sleep."""

    def __init__(self, clock: FakeClock | None = None) -> None:
        self.delays: list[float] = []
        self.clock = clock

    def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)
        if self.clock is not None:
            self.clock.advance(seconds)

    async def asleep(self, seconds: float) -> None:
        self(seconds)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def sleeper(clock: FakeClock) -> SleepRecorder:
    return SleepRecorder(clock)
