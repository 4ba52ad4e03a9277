"""How ``SQLiteStore`` lays state out on disk: the tables, opening the file, decoding rows.

A session is one row of ``sessions`` (JSON data, the JSON map of field expiries and the
earliest of them, so ``gc`` finds due fields through an index); a record is one row of
``records`` keyed by (namespace, key). ``PRAGMA user_version`` holds the schema version,
so a file written by a newer closedloop is refused instead of misread.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from .._exceptions import StoreUnavailableError
from ._contract import Record, Snapshot, live_fields
from ._json import decode_document, freeze_mapping

__all__ = [
    "SESSION_COLUMNS",
    "Row",
    "expired",
    "next_expiry",
    "open_database",
    "open_reader",
    "row_record",
    "row_snapshot",
]

_SCHEMA_VERSION = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    session_id TEXT PRIMARY KEY,
    version INTEGER NOT NULL,
    data TEXT NOT NULL,
    field_expires TEXT NOT NULL,
    next_field_expiry REAL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    ttl_s REAL,
    expires_at REAL
);
CREATE INDEX IF NOT EXISTS sessions_expires_at ON sessions(expires_at)
    WHERE expires_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS sessions_next_field_expiry ON sessions(next_field_expiry)
    WHERE next_field_expiry IS NOT NULL;
CREATE TABLE IF NOT EXISTS records (
    namespace TEXT NOT NULL,
    key TEXT NOT NULL,
    version INTEGER NOT NULL,
    value TEXT NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (namespace, key)
) WITHOUT ROWID;
"""
SESSION_COLUMNS = "version, data, field_expires, created_at, updated_at, ttl_s, expires_at"
Row = tuple[int, str, str, float, float, float | None, float | None]
"""A session row as ``SESSION_COLUMNS`` selects it."""


def open_database(
    path: Path, busy_timeout_s: float, synchronous: Literal["FULL", "NORMAL"]
) -> tuple[sqlite3.Connection, str]:
    """Open (creating or checking the schema of) the file; returns it and its journal mode."""
    if str(path) != ":memory:":
        path.parent.mkdir(parents=True, exist_ok=True)
    # isolation_level=None: transactions are ours (BEGIN IMMEDIATE), never implicit.
    conn = sqlite3.connect(str(path), timeout=busy_timeout_s, isolation_level=None)
    try:
        journal_mode = str(conn.execute("PRAGMA journal_mode=WAL").fetchone()[0])
        conn.execute(f"PRAGMA synchronous={synchronous}")
        conn.execute("BEGIN IMMEDIATE")
        try:
            found = int(conn.execute("PRAGMA user_version").fetchone()[0])
            if found > _SCHEMA_VERSION:
                raise StoreUnavailableError(
                    f"state store {str(path)!r} has schema version {found}; this "
                    f"closedloop reads up to {_SCHEMA_VERSION} (upgrade closedloop)"
                )
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    conn.execute(statement)
            conn.execute(f"PRAGMA user_version={_SCHEMA_VERSION}")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
    except BaseException:
        conn.close()
        raise
    return conn, journal_mode


def open_reader(path: Path, busy_timeout_s: float) -> sqlite3.Connection:
    """A read-only connection to an opened WAL file (any thread may use it)."""
    conn = sqlite3.connect(
        str(path), timeout=busy_timeout_s, isolation_level=None, check_same_thread=False
    )
    conn.execute("PRAGMA query_only=ON")
    return conn


def expired(row: Row, now: float) -> bool:
    """Whether the session of ``row`` has expired at ``now``."""
    return row[6] is not None and now >= row[6]


def row_snapshot(session_id: str, row: Row, now: float) -> Snapshot:
    """The snapshot a session row shows at ``now`` (its expired fields left out)."""
    version, data_text, expires_text, created_at, updated_at, _, expires_at = row
    data: dict[str, Any] = decode_document(data_text)
    field_expires: dict[str, float] = decode_document(expires_text)
    live = live_fields(field_expires, now)
    if len(live) != len(field_expires):
        data = {k: v for k, v in data.items() if k in live or k not in field_expires}
    return Snapshot(
        session_id=session_id,
        version=version,
        data=freeze_mapping(data),
        created_at=created_at,
        updated_at=updated_at,
        expires_at=expires_at,
        field_expires_at=MappingProxyType(live),
    )


def row_record(row: tuple[str, str, int, str, float]) -> Record:
    """The record of a ``records`` row (namespace, key, version, value, updated_at)."""
    namespace, key, version, value, updated_at = row
    return Record(
        namespace=namespace,
        key=key,
        version=version,
        value=freeze_mapping(decode_document(value)),
        updated_at=updated_at,
    )


def next_expiry(field_expires: Mapping[str, float]) -> float | None:
    """The earliest field expiry (indexed, so ``gc`` finds the due sessions fast)."""
    return min(field_expires.values()) if field_expires else None
