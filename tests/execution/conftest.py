"""Fixtures for the execution tests: real stores, a ledger over each, a recording sleep."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from closedloop.execution import EffectLedger
from closedloop.feedback import MemoryStore, SQLiteStore


class RecordingSleep:
    """An injected ``sleep`` that records the delays instead of waiting."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


@pytest.fixture
def sleep() -> RecordingSleep:
    return RecordingSleep()


@pytest.fixture
def make_sleep() -> type[RecordingSleep]:
    """For tests that need several independent recorders."""
    return RecordingSleep


@pytest.fixture(params=["memory", "sqlite"])
async def store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[MemoryStore | SQLiteStore]:
    """Each ledger test runs against both real backends (SQLite on a real file)."""
    backend: MemoryStore | SQLiteStore
    if request.param == "memory":
        backend = MemoryStore()
    else:
        backend = SQLiteStore(tmp_path / "ledger.db", synchronous="NORMAL")
    try:
        yield backend
    finally:
        await backend.close()


@pytest.fixture
def ledger(store: MemoryStore | SQLiteStore) -> EffectLedger:
    return EffectLedger(store)
