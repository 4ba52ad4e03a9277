"""A generation cache that survives the process: one SQLite file, keyed by the exact request.

The full HumanEval run takes hours on two cores; a run that is stopped (or crashes) picks
up where it left off, and round 1, which every strategy shares, is paid for once across
runs. Keys come from ``ModelGenerator``: they cover the model, the messages and every
sampling parameter including the seed, so a hit is the answer the call would have given.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator, MutableMapping
from dataclasses import asdict
from pathlib import Path

from .._exceptions import ConfigurationError
from .._home import closedloop_home
from ._generator import Generation

__all__ = ["GenerationCache", "default_generation_cache_path"]


def default_generation_cache_path() -> Path:
    """``$CLOSEDLOOP_HOME/cache/generations.sqlite``."""
    return closedloop_home() / "cache" / "generations.sqlite"


class GenerationCache(MutableMapping[str, Generation]):
    """A ``MutableMapping[str, Generation]`` stored in SQLite (WAL, one row per request)."""

    def __init__(self, path: str | Path | None = None) -> None:
        where = Path(path) if path is not None else default_generation_cache_path()
        try:
            where.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(str(where), check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS generations (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
            )
            self._db.commit()
        except (OSError, sqlite3.Error) as exc:
            raise ConfigurationError("path", str(where), f"cannot open the cache: {exc}") from exc
        self.path = where
        self._lock = threading.Lock()

    def __getitem__(self, key: str) -> Generation:
        with self._lock:
            row = self._db.execute("SELECT value FROM generations WHERE key = ?", (key,)).fetchone()
        if row is None:
            raise KeyError(key)
        fields = json.loads(row[0])
        fields["cached"] = False
        return Generation(**fields)

    def __setitem__(self, key: str, value: Generation) -> None:
        blob = json.dumps(asdict(value), ensure_ascii=False)
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO generations (key, value) VALUES (?, ?)", (key, blob)
            )
            self._db.commit()

    def __delitem__(self, key: str) -> None:
        with self._lock:
            cursor = self._db.execute("DELETE FROM generations WHERE key = ?", (key,))
            self._db.commit()
        if cursor.rowcount == 0:
            raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        with self._lock:
            keys = [row[0] for row in self._db.execute("SELECT key FROM generations")]
        return iter(keys)

    def __len__(self) -> int:
        with self._lock:
            (count,) = self._db.execute("SELECT COUNT(*) FROM generations").fetchone()
        return int(count)

    def close(self) -> None:
        """Close the file; the cache is unusable afterwards."""
        with self._lock:
            self._db.close()
