"""Fixtures for the feedback tests: a fake clock and both store backends."""

from __future__ import annotations

import math
import struct
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from closedloop.feedback import MemoryStore, SQLiteStore
from closedloop.feedback._store import BaseStore


class FakeClock:
    """A clock the test moves by hand."""

    def __init__(self, start: float = 1_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


StoreFactory = Callable[..., BaseStore]


@pytest.fixture(params=["memory", "sqlite"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> StoreFactory:
    """Build a store of the parametrised kind; SQLite ones share one real file in tmp_path."""

    def make(**kwargs: Any) -> BaseStore:
        if request.param == "memory":
            return MemoryStore(**kwargs)
        return SQLiteStore(tmp_path / "state.db", **kwargs)

    return make


@pytest.fixture
async def store(make_store: StoreFactory, clock: FakeClock) -> AsyncIterator[BaseStore]:
    s = make_store(clock=clock)
    yield s
    await s.close()


def same_json(a: Any, b: Any) -> bool:
    """Exact JSON equality: types must match (1 is not 1.0 is not True) and -0.0 is not 0.0."""
    return _same(a, b)


def _same(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return struct.pack("<d", a) == struct.pack("<d", b) and not math.isnan(a)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)
