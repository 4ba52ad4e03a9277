"""``BaseStore``: the machinery every state store backend shares.

The contract it implements (``Snapshot``, ``Record``, the ``StateStore`` protocol and the
field-expiry rules) is in ``_contract.py``. Backends (memory, SQLite, Redis) share one
behaviour, kept here so it cannot drift: argument checks, the JSON/size gate in front of
every write, the secret scrub behind it (sessions, records, ledger entries, handover
items: nothing is stored with a secret in clear), the field-expiry rules and the
read-modify-CAS loop behind ``update``.
"""

from __future__ import annotations

import functools
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any, ParamSpec, Self, TypeVar

from .._conflict import retry_on_conflict
from .._exceptions import (
    ConfigurationError,
    FencedOutError,
    StaleStateError,
    StateSerializationError,
)
from .._redaction import might_hold_secret, scrub_document
from .._validation import require_int_at_least, require_positive
from ._contract import (
    Hint,
    Record,
    RecordWrite,
    SessionWrite,
    Snapshot,
    StoreStats,
    Write,
)
from ._json import CheckedDocument, check_json, encode_document

__all__ = [
    "DEFAULT_MAX_DOCUMENT_BYTES",
    "BaseStore",
    "record_name",
    "stored_token",
    "writes_together",
]

DEFAULT_MAX_DOCUMENT_BYTES = 1_000_000
"""Largest session document or record value, in bytes of compact UTF-8 JSON."""

_MAX_ID_LENGTH = 1024

_P = ParamSpec("_P")
_R = TypeVar("_R")


class _Counters:
    # Updated from event-loop threads and from SyncStore's loop thread alike.
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values = {
            "cas_retries": 0,
            "cas_conflicts": 0,
            "gc_sessions": 0,
            "gc_fields": 0,
            "commits": 0,
        }

    def add(self, name: str, amount: int = 1) -> None:
        with self._lock:
            self._values[name] += amount

    def snapshot(self) -> StoreStats:
        with self._lock:
            return StoreStats(**self._values)


def _check_id(argument: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigurationError(argument, value, "must be a non-empty string")
    if len(value) > _MAX_ID_LENGTH:
        raise ConfigurationError(
            argument, value[:40] + "...", f"must be at most {_MAX_ID_LENGTH} characters"
        )
    return value


class BaseStore(ABC):
    """Behaviour every backend shares. Subclasses implement the storage operations."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.time,
        max_document_bytes: int = DEFAULT_MAX_DOCUMENT_BYTES,
    ) -> None:
        if not callable(clock):
            raise ConfigurationError("clock", clock, "must be a callable returning seconds")
        self._clock = clock
        self.max_document_bytes = require_int_at_least("max_document_bytes", max_document_bytes, 2)
        self._counters = _Counters()

    @property
    def stats(self) -> StoreStats:
        """A snapshot of this store's counters (CAS retries and conflicts, gc removals)."""
        return self._counters.snapshot()

    def _now(self) -> float:
        return float(self._clock())

    # --- the operations: checks here, storage in the backend's primitives ----------------
    # Each public operation checks its arguments once, for every backend, then calls the
    # primitive of the same name with an underscore, which sees only checked values.

    async def create(
        self, session_id: str, data: Mapping[str, Any] | None = None, *, ttl_s: float | None = None
    ) -> Snapshot:
        """Start a session at version 1; ``ConfigurationError`` if a live one has this id."""
        session_id = self._check_session_id(session_id)
        ttl = self._check_ttl(ttl_s)
        plain, text = self._check_document(
            {} if data is None else data, argument="data", what=f"session {session_id!r}"
        )
        return await self._create(session_id, plain, text, ttl)

    async def get(self, session_id: str) -> Snapshot:
        """The session's current snapshot; ``SessionNotFoundError`` if unknown or expired."""
        return await self._get(self._check_session_id(session_id))

    async def put(
        self,
        session_id: str,
        data: Mapping[str, Any],
        *,
        expected_version: int,
        field_ttl_s: Mapping[str, float] | None = None,
    ) -> Snapshot:
        """Replace the session's data if it is still at ``expected_version``."""
        session_id = self._check_session_id(session_id)
        expected = self._check_expected_version(expected_version)
        plain, text = self._check_document(data, argument="data", what=f"session {session_id!r}")
        ttls = self._check_field_ttls(field_ttl_s, plain)
        return await self._put(SessionWrite(session_id, expected, plain, text, ttls))

    async def touch(self, session_id: str, *, ttl_s: float | None = None) -> Snapshot:
        """Renew the session's TTL from now (``ttl_s``, or the one it was created with).

        The version does not change: a renewal is not a write of the data.
        """
        return await self._touch(self._check_session_id(session_id), self._check_ttl(ttl_s))

    async def delete(self, session_id: str) -> bool:
        """Remove the session; True if a live one was removed."""
        return await self._delete(self._check_session_id(session_id))

    async def gc(self) -> int:
        """Delete expired sessions and expired fields; return how many of both were removed.

        Dropping an expired field does not change the version: readers never saw it.
        """
        sessions, fields = await self._gc()
        self._counters.add("gc_sessions", sessions)
        self._counters.add("gc_fields", fields)
        return sessions + fields

    async def record_get(self, namespace: str, key: str) -> Record | None:
        """The record, or None if there is none."""
        return await self._record_get(*self._check_record_key(namespace, key))

    async def record_put(
        self,
        namespace: str,
        key: str,
        value: Mapping[str, Any],
        *,
        expected_version: int | None = None,
    ) -> Record:
        """Write a record: unconditionally (None), only if absent (0), or only at version N."""
        return await self._record_put(
            self._check_record_write(namespace, key, value, expected_version)
        )

    async def record_put_fenced(
        self,
        namespace: str,
        key: str,
        value: Mapping[str, Any],
        *,
        token: int,
        fence: str = "fence",
    ) -> Record:
        """Write a record only if it still carries fencing token ``token`` (see
        :class:`~closedloop.execution.FencedStore`); atomic in every backend."""
        write = self._check_record_write(namespace, key, value, None)
        if isinstance(token, bool) or not isinstance(token, int) or token < 0:
            raise ConfigurationError("token", token, "must be an integer >= 0")
        if not isinstance(fence, str) or not fence:
            raise ConfigurationError("fence", fence, "must be a non-empty field name")
        new = write.plain.get(fence)
        if isinstance(new, bool) or not isinstance(new, int) or new < token:
            raise ConfigurationError(
                "value", {fence: new}, f"must hold an integer {fence!r} of at least {token}"
            )
        return await self._record_put_fenced(write, fence, token)

    async def record_list(self, namespace: str, prefix: str = "") -> list[Record]:
        """Records of ``namespace`` whose key starts with ``prefix``, ordered by key."""
        namespace, _ = self._check_record_key(namespace, "-")
        if not isinstance(prefix, str):
            raise ConfigurationError("prefix", prefix, "must be a string")
        return await self._record_list(namespace, prefix)

    async def record_delete(self, namespace: str, key: str) -> bool:
        """Remove a record; True if it existed."""
        return await self._record_delete(*self._check_record_key(namespace, key))

    @abstractmethod
    async def close(self) -> None:
        """Release the backend; later operations raise ``StoreUnavailableError``."""

    # --- what a backend implements ------------------------------------------------------
    # Each backend restates these signatures: an implementation of an abstract method must.

    @abstractmethod
    async def _create(
        self, session_id: str, plain: dict[str, Any], text: str, ttl: float | None
    ) -> Snapshot:
        """Store a new session (``plain`` and its JSON ``text``) unless a live one exists."""

    @abstractmethod
    async def _get(self, session_id: str) -> Snapshot:
        """The live session's snapshot."""

    @abstractmethod
    async def _put(self, write: SessionWrite) -> Snapshot:
        """Compare-and-set the live session's data."""

    @abstractmethod
    async def _touch(self, session_id: str, ttl: float | None) -> Snapshot:
        """Renew the live session's TTL (``None``: the one it was created with)."""

    @abstractmethod
    async def _delete(self, session_id: str) -> bool:
        """Remove the session; True if a live one was removed."""

    @abstractmethod
    async def _gc(self) -> tuple[int, int]:
        """Delete expired sessions and fields; ``(sessions, fields)`` removed."""

    @abstractmethod
    async def _record_get(self, namespace: str, key: str) -> Record | None:
        """The record, or None."""

    @abstractmethod
    async def _record_put(self, write: RecordWrite) -> Record:
        """Write one checked record under the version rule of ``write.expected``."""

    @abstractmethod
    async def _record_put_fenced(self, write: RecordWrite, fence: str, token: int) -> Record:
        """Write one checked record if its stored ``fence`` field is ``token``."""

    @abstractmethod
    async def _record_list(self, namespace: str, prefix: str) -> list[Record]:
        """Records of ``namespace`` whose key starts with ``prefix``, ordered by key."""

    @abstractmethod
    async def _record_delete(self, namespace: str, key: str) -> bool:
        """Remove a record; True if it existed."""

    async def put_with_records(
        self,
        session_id: str,
        data: Mapping[str, Any],
        *,
        expected_version: int,
        records: Sequence[Hint] = (),
        writes: Sequence[Write] = (),
    ) -> Snapshot:
        """:meth:`put`, plus unconditional writes of ``(namespace, key, value)`` records and
        :meth:`record_put_many`'s conditional ``writes``.

        Everything is checked before anything is written, and the records are written only
        if the put succeeds. Here the ``writes`` go first and the records follow the put
        one by one; a backend that can (``SQLiteStore``, ``RedisStore``) writes all of it
        at once, so a step's state and its bookkeeping cost one durable commit, not several.
        """
        session_id = self._check_session_id(session_id)
        expected = self._check_expected_version(expected_version)
        plain, text = self._check_document(data, argument="data", what=f"session {session_id!r}")
        hints = [self._check_record_write(namespace, key, v, None) for namespace, key, v in records]
        save = SessionWrite(session_id, expected, plain, text, {})
        return await self._put_with_records(save, hints, self._check_record_writes(writes))

    async def _put_with_records(
        self, save: SessionWrite, hints: list[RecordWrite], writes: list[RecordWrite]
    ) -> Snapshot:
        """The conditional writes, the put, then the hints, one after another."""
        if writes:
            await self._record_put_many(writes)
        snapshot = await self._put(save)
        for hint in hints:
            await self._record_put(hint)
        return snapshot

    async def record_put_many(self, items: Sequence[Write]) -> list[Record]:
        """Several :meth:`record_put` calls, ``(namespace, key, value, expected_version)``.

        Here they run one by one, so a conflict on a later item leaves the earlier ones
        written; ``MemoryStore`` and ``SQLiteStore`` check every version first and write
        all or nothing, in one transaction (one durable commit).
        """
        return await self._record_put_many(self._check_record_writes(items))

    async def _record_put_many(self, writes: list[RecordWrite]) -> list[Record]:
        return [await self._record_put(write) for write in writes]

    # --- the shared read-modify-CAS loop -------------------------------------------------

    async def update(
        self,
        session_id: str,
        fn: Callable[[Snapshot], Mapping[str, Any]],
        *,
        max_attempts: int = 16,
        field_ttl_s: Mapping[str, float] | None = None,
    ) -> Snapshot:
        """Read, apply ``fn`` to the snapshot, and compare-and-set the result.

        On a lost race ``fn`` runs again on the fresh snapshot (so it must be a pure
        function of its argument); each retry is counted in ``stats.cas_retries``. After
        ``max_attempts`` lost races the last :class:`StaleStateError` is raised.
        """
        require_int_at_least("max_attempts", max_attempts, 1)

        async def attempt(n: int) -> Snapshot:
            if n > 1:
                self._counters.add("cas_retries")
            snapshot = await self.get(session_id)
            return await self.put(
                session_id,
                fn(snapshot),
                expected_version=snapshot.version,
                field_ttl_s=field_ttl_s,
            )

        return (await retry_on_conflict(attempt, max_attempts)).unwrap()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # --- argument and value checks -------------------------------------------------------

    @staticmethod
    def _check_session_id(session_id: object) -> str:
        return _check_id("session_id", session_id)

    @staticmethod
    def _check_record_key(namespace: object, key: object) -> tuple[str, str]:
        return _check_id("namespace", namespace), _check_id("key", key)

    def _check_record_write(
        self, namespace: object, key: object, value: object, expected_version: object
    ) -> RecordWrite:
        """Every record write's checks."""
        namespace, key = self._check_record_key(namespace, key)
        expected = (
            None if expected_version is None else self._check_expected_version(expected_version)
        )
        plain, text = self._check_document(
            value, argument="value", what=f"record {record_name(namespace, key)!r}"
        )
        return RecordWrite(namespace, key, expected, plain, text)

    def _check_record_writes(self, items: Sequence[Write]) -> list[RecordWrite]:
        """:meth:`_check_record_write` for each ``(namespace, key, value, expected)``."""
        return [self._check_record_write(*item) for item in items]

    @staticmethod
    def _check_ttl(ttl_s: float | None) -> float | None:
        return None if ttl_s is None else require_positive("ttl_s", ttl_s)

    @staticmethod
    def _check_expected_version(expected_version: object) -> int:
        if isinstance(expected_version, bool) or not isinstance(expected_version, int):
            raise ConfigurationError(
                "expected_version", expected_version, "must be an integer version"
            )
        if expected_version < 0:
            raise ConfigurationError("expected_version", expected_version, "must be >= 0")
        return expected_version

    @staticmethod
    def _check_field_ttls(
        field_ttl_s: Mapping[str, float] | None, plain: Mapping[str, Any]
    ) -> dict[str, float]:
        if field_ttl_s is None:
            return {}
        if not isinstance(field_ttl_s, Mapping):
            raise ConfigurationError("field_ttl_s", field_ttl_s, "must be a mapping of seconds")
        missing = sorted(str(name) for name in field_ttl_s if name not in plain)
        if missing:
            raise ConfigurationError(
                "field_ttl_s", dict(field_ttl_s), f"names fields not in data: {missing}"
            )
        return {
            name: require_positive(f"field_ttl_s[{name!r}]", ttl)
            for name, ttl in field_ttl_s.items()
        }

    def _check_document(
        self, data: object, *, argument: str, what: str
    ) -> tuple[dict[str, Any], str]:
        """Validate a top-level JSON object; return its plain copy and its JSON text, with
        every secret in its text replaced by a reference (see ``closedloop/_redaction.py``).

        The one boundary every write crosses, whatever wrote it: the loop's task state,
        the ledger's arguments and results, the service's run records, handover items."""
        if type(data) is CheckedDocument:  # checked and encoded by its maker
            if not might_hold_secret(data.text):
                self._check_size(data.text, what)
                return data.plain, data.text
            data = data.plain  # a candidate: the full path below, on a copy, scrubs it
        if not isinstance(data, Mapping):
            raise ConfigurationError(
                argument, type(data).__name__, "must be a mapping (a JSON object)"
            )
        plain: dict[str, Any] = check_json(data, argument)
        text = encode_document(plain)
        # One probe of the text first: most documents hold no candidate at all.
        if might_hold_secret(text) and scrub_document(plain):
            text = encode_document(plain)
        self._check_size(text, what)
        return plain, text

    def _check_size(self, text: str, what: str) -> None:
        # ASCII text (most state) is one byte a character: no need to encode it to count.
        size = len(text) if text.isascii() else len(text.encode("utf-8"))
        if size > self.max_document_bytes:
            raise StateSerializationError(
                f"{what}: {size} bytes of JSON, above max_document_bytes="
                f"{self.max_document_bytes}; nothing was written (compact the state, e.g. "
                "summarise or drop old fields, or raise the limit)"
            )

    def _stale(self, name: str, expected: int, actual: int | None) -> StaleStateError:
        self._counters.add("cas_conflicts")
        return StaleStateError(name, expected, actual)

    def _fenced(self, name: str, token: int, actual: int | None) -> FencedOutError:
        self._counters.add("cas_conflicts")
        return FencedOutError(name, token, actual)


def stored_token(value: Mapping[str, Any] | None, fence: str) -> int:
    """The fencing token a stored record value carries (0 for none, or no record)."""
    token = None if value is None else value.get(fence)
    return token if isinstance(token, int) and not isinstance(token, bool) else 0


def record_name(namespace: str, key: str) -> str:
    """How a record is named in errors (``StaleStateError`` calls it a session)."""
    return f"{namespace}/{key}"


def writes_together(
    front: Callable[_P, Coroutine[Any, Any, _R]],
) -> Callable[_P, Coroutine[Any, Any, _R]]:
    """A backend's own ``put_with_records``: ``BaseStore``'s checks, then its own
    ``_put_with_records`` (one transaction, one script).

    A class of its own, not ``BaseStore``'s, because callers ask the class whether a save
    carries its records in one write (``type(store).put_with_records is not
    BaseStore.put_with_records``) before they hold writes back for it.
    """

    @functools.wraps(front)
    async def together(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        return await front(*args, **kwargs)

    return together
