"""The SQLite store's worker thread: one connection, its transactions, group commit.

One dedicated thread owns the writing connection and runs every write, so the event loop
never waits for a sync: writes that wait for the thread together share one ``BEGIN
IMMEDIATE`` transaction and one sync (group commit, as databases batch their log
flushes), each in its own savepoint. A read runs alone in autocommit mode (one consistent
WAL snapshot), in WAL mode on the calling thread's own read-only connection (a WAL reader
never waits for the writer, and the hop to the worker thread and back costs more CPU than
the read), else on the worker. ``SQLiteStore`` is built on this and adds the store's
operations.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

from .._exceptions import StoreUnavailableError
from ._sqlite_schema import open_database, open_reader
from ._store import _Counters

__all__ = ["SQLiteWorker"]

_T = TypeVar("_T")


class SQLiteWorker:
    """The thread, the connection and the write queue of one SQLite file.

    The store's constructor sets the attributes below, starts ``_executor`` and runs
    :meth:`_open` on it; every operation then goes through :meth:`_call`.
    """

    path: Path
    synchronous: Literal["FULL", "NORMAL"]
    journal_mode: str
    _busy_timeout_s: float
    _conn: sqlite3.Connection | None
    _closed: bool
    _writes: collections.deque[_Write]
    _executor: ThreadPoolExecutor
    _counters: _Counters
    inline_reads: bool
    _readers: dict[int, sqlite3.Connection]

    def _open(self) -> None:
        self._conn, self.journal_mode = open_database(
            self.path, self._busy_timeout_s, self.synchronous
        )

    def _read_here(self, fn: Callable[[sqlite3.Connection], _T]) -> _T:
        """A read on the calling thread, on that thread's own read-only connection."""
        thread = threading.get_ident()
        conn = self._readers.get(thread)
        try:
            if conn is None:
                conn = self._readers[thread] = open_reader(self.path, self._busy_timeout_s)
            return fn(conn)
        except (sqlite3.Error, OSError) as exc:
            raise StoreUnavailableError(f"state store {str(self.path)!r}: {exc}") from exc

    def _run_in_worker(self, fn: Callable[[sqlite3.Connection], _T], write: bool) -> _T:
        try:
            conn = self._connection()
            if not write:
                # One SELECT in autocommit mode reads one consistent WAL snapshot.
                return fn(conn)
            return self._transaction(conn, lambda: fn(conn))
        except (sqlite3.Error, OSError) as exc:
            raise StoreUnavailableError(f"state store {str(self.path)!r}: {exc}") from exc

    def _transaction(self, conn: sqlite3.Connection, body: Callable[[], _T]) -> _T:
        """``body`` in one write transaction: committed (one sync) or rolled back whole."""
        conn.execute("BEGIN IMMEDIATE")
        try:
            result = body()
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        self._counters.add("commits")
        return result

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreUnavailableError(f"state store {str(self.path)!r} is closed")
        return self._conn

    async def _call(self, fn: Callable[[sqlite3.Connection], _T], *, write: bool) -> _T:
        if self._closed:
            raise StoreUnavailableError(f"state store {str(self.path)!r} is closed")
        if not write and self.inline_reads:
            return self._read_here(fn)
        loop = asyncio.get_running_loop()
        try:
            if not write:
                call = functools.partial(self._run_in_worker, fn, write)
                return await loop.run_in_executor(self._executor, call)
            done: asyncio.Future[_T] = loop.create_future()
            self._writes.append(_Write(fn, done, loop))
            self._executor.submit(self._commit_waiting)
        except RuntimeError as exc:  # the executor was shut down by a concurrent close()
            if not self._closed:
                raise
            raise StoreUnavailableError(f"state store {str(self.path)!r} is closed") from exc
        return await done

    def _commit_waiting(self) -> None:
        """Group commit: every write waiting now, in one transaction and one sync.

        Writes that arrive while a commit syncs wait for the next one, so concurrent runs
        share the fsync instead of queueing behind one each. Each write runs inside its
        own savepoint: one that raises is rolled back alone and the others still commit.
        A write's caller hears back only after the commit, so a write that returned is
        as durable as before; a failed commit fails every write of the batch.
        """
        batch: list[_Write] = []
        while self._writes:
            job = self._writes.popleft()
            if not job.done.cancelled():  # cancelled before it started: never written
                batch.append(job)
        if not batch:
            return  # an earlier call took these writes
        if len(batch) == 1:
            job = batch[0]
            try:
                _resolve(job, self._run_in_worker(job.fn, True), None)
            except BaseException as exc:
                _resolve(job, None, exc)
            return
        outcomes: list[tuple[_Write, Any, BaseException | None]] = []
        try:
            conn = self._connection()

            def each() -> None:
                for job in batch:
                    conn.execute("SAVEPOINT closedloop_write")
                    try:
                        result = job.fn(conn)
                    except BaseException as exc:  # this write's own failure: only it is undone
                        conn.execute("ROLLBACK TO closedloop_write")
                        conn.execute("RELEASE closedloop_write")
                        outcomes.append((job, None, exc))
                    else:
                        conn.execute("RELEASE closedloop_write")
                        outcomes.append((job, result, None))

            self._transaction(conn, each)
        except (sqlite3.Error, OSError, StoreUnavailableError) as exc:
            for job in batch:
                failure = (
                    exc
                    if isinstance(exc, StoreUnavailableError)
                    else StoreUnavailableError(f"state store {str(self.path)!r}: {exc}")
                )
                _resolve(job, None, failure)
            return
        for job, result, error in outcomes:
            if isinstance(error, sqlite3.Error | OSError):
                error = StoreUnavailableError(f"state store {str(self.path)!r}: {error}")
            _resolve(job, result, error)

    async def close(self) -> None:
        """Close the file and stop the worker thread. Idempotent."""
        if self._closed:
            return
        self._closed = True

        readers, self._readers = list(self._readers.values()), {}
        for reader in readers:
            reader.close()

        def run() -> None:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._executor, run)
        finally:
            self._executor.shutdown(wait=False)


@dataclass(frozen=True, slots=True)
class _Write:
    """One write waiting for the worker: what to run, and where its caller waits."""

    fn: Callable[[sqlite3.Connection], Any]
    done: asyncio.Future[Any]
    loop: asyncio.AbstractEventLoop


def _resolve(job: _Write, result: Any, error: BaseException | None) -> None:
    """Hand a write's outcome to its caller's event loop (from the worker thread)."""

    def settle() -> None:
        if job.done.cancelled():
            return
        if error is None:
            job.done.set_result(result)
        else:
            job.done.set_exception(error)

    with contextlib.suppress(RuntimeError):  # that loop is closed: nobody waits any more
        job.loop.call_soon_threadsafe(settle)
