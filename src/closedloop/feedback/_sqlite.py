"""``SQLiteStore``: the embedded default state store, one WAL-mode SQLite file.

One dedicated thread owns the connection and runs every operation (``_sqlite_worker.py``),
so the event loop never blocks on disk and SQLite is only ever used from the thread that
opened it. Each write
reads the version and writes inside a ``BEGIN IMMEDIATE`` transaction, under one lock, so
compare-and-set holds across processes that share the file, not only across tasks. Writes
that wait for the thread together share one transaction and one sync (group commit, as
databases batch their log flushes), each in its own savepoint.
"""

from __future__ import annotations

import collections
import os
import sqlite3
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from .._exceptions import ConfigurationError, SessionNotFoundError, StoreUnavailableError
from .._validation import require_positive
from ._contract import Record, RecordWrite, SessionWrite, Snapshot, live_fields, merge_field_expiry
from ._json import decode_document, encode_document, freeze_mapping
from ._paths import default_state_path
from ._sqlite_schema import (
    SESSION_COLUMNS,
    Row,
    expired,
    next_expiry,
    row_record,
    row_snapshot,
)
from ._sqlite_worker import SQLiteWorker
from ._store import (
    DEFAULT_MAX_DOCUMENT_BYTES,
    BaseStore,
    record_name,
    stored_token,
    writes_together,
)

__all__ = ["SQLiteStore"]


class SQLiteStore(SQLiteWorker, BaseStore):
    """A :class:`StateStore` in a WAL-mode SQLite file, safe to share between processes.

    ``path`` defaults to ``$CLOSEDLOOP_HOME/state.db``; missing parent directories are
    created. ``synchronous="FULL"`` (the default) syncs the WAL on every commit, so a
    write that returned survives power loss, which the effect ledger relies on.
    ``"NORMAL"`` skips that fsync (one measurement: 0.2 ms instead of 5 ms per update) and
    still survives a killed process (the WAL is written before commit returns), but may
    lose the last commits on an OS crash or power cut; it never corrupts the file.
    ``busy_timeout_s`` bounds how long a write waits for another process's transaction
    before ``StoreUnavailableError``.

    Writes go to the store's worker thread. Reads, with ``inline_reads=True`` (the
    default) and the file in WAL mode, run on the calling thread, each thread on a
    read-only connection of its own: a WAL reader never waits for the writer, and a point
    read there costs microseconds where handing it to the worker thread and back costs
    about nine times as much CPU. A read sees every write that has returned. With
    ``inline_reads=False`` (or a file not in WAL mode) reads queue behind the worker's
    writes too, so the event loop never touches the disk, which suits a file much larger
    than the page cache; ``store.inline_reads`` says which holds.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        clock: Callable[[], float] = time.time,
        synchronous: Literal["FULL", "NORMAL"] = "FULL",
        max_document_bytes: int = DEFAULT_MAX_DOCUMENT_BYTES,
        busy_timeout_s: float = 30.0,
        inline_reads: bool = True,
    ) -> None:
        super().__init__(clock=clock, max_document_bytes=max_document_bytes)
        if synchronous not in ("FULL", "NORMAL"):
            raise ConfigurationError("synchronous", synchronous, "must be 'FULL' or 'NORMAL'")
        self.path = Path(path) if path is not None else default_state_path()
        self.synchronous = synchronous
        self._busy_timeout_s = require_positive("busy_timeout_s", busy_timeout_s)
        if not isinstance(inline_reads, bool):
            raise ConfigurationError("inline_reads", inline_reads, "must be True or False")
        self._conn: sqlite3.Connection | None = None
        self._closed = False
        self.journal_mode = ""
        self._writes = collections.deque()
        self.inline_reads = False
        self._readers = {}
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="closedloop-sqlite")
        try:
            self._executor.submit(self._open).result()
            self.inline_reads = inline_reads and self.journal_mode.lower() == "wal"
        except (sqlite3.Error, OSError) as exc:
            self._executor.shutdown(wait=False)
            raise StoreUnavailableError(f"state store {str(self.path)!r}: {exc}") from exc
        except BaseException:
            self._executor.shutdown(wait=False)
            raise

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.path)!r}, synchronous={self.synchronous!r})"

    # --- sessions (the checks are BaseStore's) ------------------------------------------------------------------------

    @staticmethod
    def _fetch(conn: sqlite3.Connection, session_id: str) -> Row | None:
        row: Row | None = conn.execute(
            f"SELECT {SESSION_COLUMNS} FROM sessions WHERE session_id = ?", (session_id,)
        ).fetchone()
        return row

    def _fetch_live(self, conn: sqlite3.Connection, session_id: str, now: float) -> Row:
        row = self._fetch(conn, session_id)
        if row is None:
            raise SessionNotFoundError(f"session {session_id!r} not found")
        if expired(row, now):
            raise SessionNotFoundError(f"session {session_id!r} expired at {row[6]} (now {now})")
        return row

    async def _create(
        self, session_id: str, plain: dict[str, Any], text: str, ttl: float | None
    ) -> Snapshot:
        now = self._now()
        expires_at = None if ttl is None else now + ttl

        def run(conn: sqlite3.Connection) -> Snapshot:
            old = self._fetch(conn, session_id)
            if old is not None and not expired(old, now):
                raise ConfigurationError("session_id", session_id, "a session with this id exists")
            row: Row = (1, text, "{}", now, now, ttl, expires_at)
            conn.execute(
                "INSERT OR REPLACE INTO sessions (session_id, version, data, field_expires, "
                "next_field_expiry, created_at, updated_at, ttl_s, expires_at) "
                "VALUES (?, ?, ?, ?, NULL, ?, ?, ?, ?)",
                (session_id, *row),
            )
            return row_snapshot(session_id, row, now)

        return await self._call(run, write=True)

    async def _get(self, session_id: str) -> Snapshot:
        now = self._now()

        def run(conn: sqlite3.Connection) -> Snapshot:
            return row_snapshot(session_id, self._fetch_live(conn, session_id, now), now)

        return await self._call(run, write=False)

    async def _put(self, write: SessionWrite) -> Snapshot:
        now = self._now()

        def run(conn: sqlite3.Connection) -> Snapshot:
            return self._put_in(conn, write, now)

        return await self._call(run, write=True)

    put_with_records = writes_together(BaseStore.put_with_records)

    async def _put_with_records(
        self, save: SessionWrite, hints: list[RecordWrite], writes: list[RecordWrite]
    ) -> Snapshot:
        # The put, the conditional writes and the hints in one transaction (one commit): a
        # conflict anywhere writes nothing.
        now = self._now()

        def run(conn: sqlite3.Connection) -> Snapshot:
            snapshot = self._put_in(conn, save, now)
            for write in writes:
                self._write_record(conn, write, now)
            for namespace, key, _, _, value_text in hints:
                conn.execute(
                    "INSERT INTO records (namespace, key, version, value, updated_at) "
                    "VALUES (?, ?, 1, ?, ?) ON CONFLICT (namespace, key) DO UPDATE SET "
                    "version = version + 1, value = excluded.value, "
                    "updated_at = excluded.updated_at",
                    (namespace, key, value_text, now),
                )
            return snapshot

        return await self._call(run, write=True)

    def _put_in(self, conn: sqlite3.Connection, write: SessionWrite, now: float) -> Snapshot:
        session_id, expected, plain, text, ttls = write
        old = self._fetch_live(conn, session_id, now)
        if old[0] != expected:
            raise self._stale(session_id, expected, old[0])
        old_expires: dict[str, float] = decode_document(old[2])
        expires = merge_field_expiry(old_expires, plain, ttls, now)
        row: Row = (old[0] + 1, text, encode_document(expires), old[3], now, old[5], old[6])
        conn.execute(
            "UPDATE sessions SET version = ?, data = ?, field_expires = ?, "
            "next_field_expiry = ?, updated_at = ? WHERE session_id = ?",
            (row[0], text, row[2], next_expiry(expires), now, session_id),
        )
        if not expires:  # the common case: build the snapshot from the checked copy
            return Snapshot(
                session_id=session_id,
                version=row[0],
                data=freeze_mapping(plain),
                created_at=row[3],
                updated_at=now,
                expires_at=row[6],
                field_expires_at=MappingProxyType({}),
            )
        return row_snapshot(session_id, row, now)

    async def _touch(self, session_id: str, new_ttl: float | None) -> Snapshot:
        now = self._now()

        def run(conn: sqlite3.Connection) -> Snapshot:
            old = self._fetch_live(conn, session_id, now)
            ttl = old[5] if new_ttl is None else new_ttl
            expires_at = None if ttl is None else now + ttl
            conn.execute(
                "UPDATE sessions SET ttl_s = ?, expires_at = ? WHERE session_id = ?",
                (ttl, expires_at, session_id),
            )
            return row_snapshot(session_id, (*old[:5], ttl, expires_at), now)

        return await self._call(run, write=True)

    async def _delete(self, session_id: str) -> bool:
        now = self._now()

        def run(conn: sqlite3.Connection) -> bool:
            row = self._fetch(conn, session_id)
            if row is None:
                return False
            conn.execute("DELETE FROM sessions WHERE session_id = ?", (session_id,))
            return not expired(row, now)

        return await self._call(run, write=True)

    async def _gc(self) -> tuple[int, int]:
        now = self._now()

        def run(conn: sqlite3.Connection) -> tuple[int, int]:
            sessions = conn.execute(
                "DELETE FROM sessions WHERE expires_at IS NOT NULL AND expires_at <= ?", (now,)
            ).rowcount
            fields = 0
            rows = conn.execute(
                "SELECT session_id, data, field_expires FROM sessions "
                "WHERE next_field_expiry IS NOT NULL AND next_field_expiry <= ?",
                (now,),
            ).fetchall()
            for session_id, data_text, expires_text in rows:
                expires: dict[str, float] = decode_document(expires_text)
                live = live_fields(expires, now)
                gone = expires.keys() - live.keys()
                fields += len(gone)
                data = {k: v for k, v in decode_document(data_text).items() if k not in gone}
                conn.execute(
                    "UPDATE sessions SET data = ?, field_expires = ?, next_field_expiry = ? "
                    "WHERE session_id = ?",
                    (encode_document(data), encode_document(live), next_expiry(live), session_id),
                )
            return sessions, fields

        return await self._call(run, write=True)

    # --- records -------------------------------------------------------------------------

    async def _record_get(self, namespace: str, key: str) -> Record | None:
        def run(conn: sqlite3.Connection) -> Record | None:
            row = conn.execute(
                "SELECT namespace, key, version, value, updated_at FROM records "
                "WHERE namespace = ? AND key = ?",
                (namespace, key),
            ).fetchone()
            return None if row is None else row_record(row)

        return await self._call(run, write=False)

    async def _record_put(self, write: RecordWrite) -> Record:
        now = self._now()

        def run(conn: sqlite3.Connection) -> Record:
            return self._write_record(conn, write, now)

        return await self._call(run, write=True)

    async def _record_put_fenced(self, write: RecordWrite, fence: str, token: int) -> Record:
        namespace, key = write.namespace, write.key
        now = self._now()

        def run(conn: sqlite3.Connection) -> Record:
            # Read and write in one write transaction: no other writer, in this process or
            # another, can move the token in between.
            row = conn.execute(
                "SELECT version, value FROM records WHERE namespace = ? AND key = ?",
                (namespace, key),
            ).fetchone()
            actual = stored_token(None if row is None else decode_document(row[1]), fence)
            if actual != token:
                raise self._fenced(record_name(namespace, key), token, actual)
            return self._write_record(
                conn, write._replace(expected=0 if row is None else row[0]), now
            )

        return await self._call(run, write=True)

    async def _record_put_many(self, writes: list[RecordWrite]) -> list[Record]:
        # All or none, in one transaction: a conflict raises out of the loop and the
        # transaction rolls back whole.
        now = self._now()

        def run(conn: sqlite3.Connection) -> list[Record]:
            return [self._write_record(conn, write, now) for write in writes]

        return await self._call(run, write=True)

    def _write_record(self, conn: sqlite3.Connection, write: RecordWrite, now: float) -> Record:
        namespace, key, expected, plain, text = write
        if expected is None:
            row = conn.execute(
                "SELECT version FROM records WHERE namespace = ? AND key = ?", (namespace, key)
            ).fetchone()
            version = (0 if row is None else int(row[0])) + 1
            conn.execute(
                "INSERT OR REPLACE INTO records (namespace, key, version, value, updated_at) "
                "VALUES (?, ?, ?, ?, ?)",
                (namespace, key, version, text, now),
            )
        else:
            # A compare-and-set is one statement that writes only at the expected version
            # (absent for 0); the version is read only to name it in the conflict.
            if expected == 0:
                cursor = conn.execute(
                    "INSERT INTO records (namespace, key, version, value, updated_at) "
                    "VALUES (?, ?, 1, ?, ?) ON CONFLICT (namespace, key) DO NOTHING",
                    (namespace, key, text, now),
                )
            else:
                cursor = conn.execute(
                    "UPDATE records SET version = ?, value = ?, updated_at = ? "
                    "WHERE namespace = ? AND key = ? AND version = ?",
                    (expected + 1, text, now, namespace, key, expected),
                )
            if cursor.rowcount != 1:
                row = conn.execute(
                    "SELECT version FROM records WHERE namespace = ? AND key = ?",
                    (namespace, key),
                ).fetchone()
                raise self._stale(
                    record_name(namespace, key), expected, None if row is None else row[0]
                )
            version = expected + 1
        return Record(
            namespace=namespace,
            key=key,
            version=version,
            value=freeze_mapping(plain),
            updated_at=now,
        )

    async def _record_list(self, namespace: str, prefix: str) -> list[Record]:
        def run(conn: sqlite3.Connection) -> list[Record]:
            # substr, not LIKE: LIKE folds ASCII case and treats % and _ as wildcards.
            rows = conn.execute(
                "SELECT namespace, key, version, value, updated_at FROM records "
                "WHERE namespace = ? AND substr(key, 1, ?) = ? ORDER BY key",
                (namespace, len(prefix), prefix),
            ).fetchall()
            return [row_record(row) for row in rows]

        return await self._call(run, write=False)

    async def _record_delete(self, namespace: str, key: str) -> bool:
        def run(conn: sqlite3.Connection) -> bool:
            cur = conn.execute(
                "DELETE FROM records WHERE namespace = ? AND key = ?", (namespace, key)
            )
            return cur.rowcount > 0

        return await self._call(run, write=True)
