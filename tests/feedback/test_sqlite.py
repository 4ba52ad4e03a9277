"""SQLiteStore specifics: file location, WAL, schema guard, corrupt files, shared files."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from closedloop import ConfigurationError, StaleStateError, StoreUnavailableError
from closedloop._home import closedloop_home
from closedloop.feedback import SQLiteStore
from closedloop.feedback._paths import default_state_path

from .conftest import FakeClock


async def test_default_path_is_under_closedloop_home(closedloop_home: Path) -> None:
    async with SQLiteStore() as store:
        assert store.path == closedloop_home / "state.db"
        await store.create("s", {"a": 1})
    assert (closedloop_home / "state.db").is_file()


def test_closedloop_home_defaults_to_the_user_cache(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("CLOSEDLOOP_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert closedloop_home() == tmp_path / ".cache" / "closedloop"
    monkeypatch.setenv("CLOSEDLOOP_HOME", "~/elsewhere")
    assert default_state_path() == tmp_path / "elsewhere" / "state.db"
    monkeypatch.setenv("CLOSEDLOOP_HOME", "  ")
    assert closedloop_home() == tmp_path / ".cache" / "closedloop"


async def test_file_is_in_wal_mode_with_full_sync(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "dirs" / "state.db"
    async with SQLiteStore(path) as store:
        assert store.journal_mode == "wal"
        await store.create("s", {})
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_synchronous_is_validated(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="synchronous"):
        SQLiteStore(tmp_path / "s.db", synchronous="OFF")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="busy_timeout_s"):
        SQLiteStore(tmp_path / "s.db", busy_timeout_s=0)


def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "future.db"
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA user_version=99")
    with pytest.raises(StoreUnavailableError, match="schema version 99"):
        SQLiteStore(path)


def test_a_corrupt_file_is_store_unavailable(tmp_path: Path) -> None:
    path = tmp_path / "corrupt.db"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreUnavailableError, match=r"corrupt\.db"):
        SQLiteStore(path)


def test_an_unwritable_location_is_store_unavailable(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(StoreUnavailableError):
        SQLiteStore(blocker / "state.db")


async def test_two_connections_share_state_and_versions(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "shared.db"
    async with SQLiteStore(path, clock=clock) as one, SQLiteStore(path, clock=clock) as two:
        await one.create("s", {"n": 1}, ttl_s=10)
        snap = await two.get("s")
        assert snap.data["n"] == 1
        await two.put("s", {"n": 2}, expected_version=snap.version)
        with pytest.raises(StaleStateError):
            await one.put("s", {"n": 3}, expected_version=snap.version)
        assert (await one.get("s")).data["n"] == 2
        await one.record_put("ledger", "k", {"s": "pending"}, expected_version=0)
        with pytest.raises(StaleStateError):
            await two.record_put("ledger", "k", {"s": "pending"}, expected_version=0)
        clock.advance(10)
        assert await two.gc() == 1
        assert await one.gc() == 0


async def test_state_survives_close_and_reopen(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "reopen.db"
    async with SQLiteStore(path, clock=clock) as store:
        await store.create("s", {"x": [1, 2, {"y": None}]}, ttl_s=100)
        await store.put("s", {"x": "z", "t": 1}, expected_version=1, field_ttl_s={"t": 5})
        await store.record_put("q", "k", {"v": True})
    async with SQLiteStore(path, clock=clock) as store:
        snap = await store.get("s")
        assert (snap.version, snap.to_dict()) == (2, {"x": "z", "t": 1})
        assert snap.expires_at == clock.now + 100
        assert dict(snap.field_expires_at) == {"t": clock.now + 5}
        record = await store.record_get("q", "k")
        assert record is not None and record.to_dict() == {"v": True}
