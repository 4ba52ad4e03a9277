"""A completion cache for benchmarks: exact prompt and parameters in, the stored answer out.

Only calls at temperature 0 are cached: there a model's answer is a function of its
input, so replaying it changes nothing but the wall time. The key is the SHA-256 of the
canonical JSON of everything the call sends (model name, messages, response schema,
max_tokens, stop, seed, tools). Entries live in one SQLite file under
``$CLOSEDLOOP_HOME/cache`` and survive between runs; the report says how many answers
came from it. Identical calls in flight at the same time are coalesced, so strategies
that share their first steps pay for them once.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sqlite3
import threading
import uuid
from pathlib import Path
from typing import Any

from closedloop._exceptions import ConfigurationError
from closedloop._home import closedloop_home
from closedloop.models import (
    DEFAULT_REQUEST,
    Completion,
    MessagesInput,
    Model,
    ModelRequest,
    WrapperModel,
    normalize_messages,
)

__all__ = ["CacheStats", "CachingModel", "CompletionCache", "cache_key", "default_cache_path"]


def default_cache_path() -> Path:
    """``$CLOSEDLOOP_HOME/cache/completions.sqlite``."""
    return closedloop_home() / "cache" / "completions.sqlite"


def cache_key(model: str, messages: MessagesInput, **params: Any) -> str:
    """The key of one call: a digest of the model name, the messages and every parameter."""
    payload = {
        "model": model,
        "messages": [m.to_dict() for m in normalize_messages(messages)],
        "params": params,
    }
    text = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class CacheStats:
    """Hits, misses and coalesced calls (thread-safe counters)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        self.coalesced = 0
        self.uncacheable = 0

    def add(self, name: str) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + 1)

    def as_dict(self) -> dict[str, int]:
        with self._lock:
            return {
                "hits": self.hits,
                "misses": self.misses,
                "coalesced": self.coalesced,
                "uncacheable": self.uncacheable,
            }


class CompletionCache:
    """Completions stored by key in a SQLite file (``path``) or in memory (``":memory:"``)."""

    def __init__(self, path: str | Path | None = None) -> None:
        where = default_cache_path() if path is None else path
        self.path = where if str(where) == ":memory:" else Path(where)
        if isinstance(self.path, Path):
            if self.path.is_dir():
                raise ConfigurationError("path", str(self.path), "is a directory, not a file")
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(self.path), check_same_thread=False)
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS completions (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
            )
            self._db.commit()

    def __repr__(self) -> str:
        return f"CompletionCache({str(self.path)!r}, entries={len(self)})"

    def __len__(self) -> int:
        with self._lock:
            row = self._db.execute("SELECT COUNT(*) FROM completions").fetchone()
        return int(row[0])

    def get(self, key: str) -> Completion | None:
        """The stored completion for ``key``, or None."""
        with self._lock:
            row = self._db.execute("SELECT value FROM completions WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        try:
            return Completion.model_validate_json(row[0])
        except ValueError:  # written by an incompatible version: treat as absent
            return None

    def put(self, key: str, completion: Completion) -> None:
        """Store ``completion`` under ``key`` (replacing any older entry)."""
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO completions (key, value) VALUES (?, ?)",
                (key, completion.model_dump_json()),
            )
            self._db.commit()

    def close(self) -> None:
        with self._lock:
            self._db.close()


class CachingModel(WrapperModel):
    """Wraps ``inner``: temperature-0 calls are answered from ``cache`` when it holds them.

    A hit returns the stored completion with a fresh ``call_id`` and its original
    ``latency_s`` (the compute time it cost when it was made), so latency accounting
    can charge it as if it had run. Calls with a temperature above 0 always go through.
    """

    def __init__(self, inner: Model, cache: CompletionCache, *, name: str | None = None) -> None:
        super().__init__(inner, name=name)
        self.cache = cache
        self.stats = CacheStats()
        self._inflight: dict[str, asyncio.Future[Completion]] = {}

    async def complete(
        self, messages: MessagesInput, request: ModelRequest = DEFAULT_REQUEST
    ) -> Completion:
        """Answer from the cache, from an identical call in flight, or from ``inner``."""
        if request.temperature != 0.0:
            self.stats.add("uncacheable")
            return await self.inner.complete(messages, request)
        # The key leaves out what does not change the answer: the call id and the timeout.
        key = cache_key(
            self.inner.name,
            messages,
            response_schema=request.response_schema,
            max_tokens=request.max_tokens,
            stop=list(request.stop),
            seed=request.seed,
            tools=list(request.tools),
        )
        call_id = request.call_id
        while True:
            stored = self.cache.get(key)
            if stored is not None:
                self.stats.add("hits")
                return _fresh(stored, call_id)
            running = self._inflight.get(key)
            if running is None:
                break
            try:
                shared = await asyncio.shield(running)
            except asyncio.CancelledError:
                if not running.cancelled():
                    raise  # this caller was cancelled, not the call it waited for
                continue  # the caller that made it was cancelled: look again
            self.stats.add("coalesced")
            return _fresh(shared, call_id)
        future: asyncio.Future[Completion] = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        try:
            completion = await self.inner.complete(messages, request)
        except asyncio.CancelledError:
            future.cancel()  # waiters look again instead of sharing a cancellation
            raise
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: nobody may be waiting on it
            raise
        finally:
            self._inflight.pop(key, None)
        self.stats.add("misses")
        self.cache.put(key, completion)
        future.set_result(completion)
        return completion


def _fresh(completion: Completion, call_id: str | None) -> Completion:
    return completion.model_copy(update={"call_id": call_id or uuid.uuid4().hex[:16]})
