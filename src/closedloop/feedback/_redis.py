"""``RedisStore``: the state store shared by several workers through one Redis server.

Every write is one Lua script (see ``_redis_scripts``) that checks the version and writes
in a single atomic step inside Redis, so two workers racing on a session or a record never
both win. Expiry is decided from the injected clock exactly as the other stores decide it;
Redis's own key expiry follows a little later only to reclaim memory when no one runs
``gc``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import secrets
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

from .._exceptions import (
    ClosedLoopError,
    ConfigurationError,
    SessionNotFoundError,
    StoreUnavailableError,
)
from .._validation import require_non_negative, require_positive
from ._contract import Record, RecordWrite, SessionWrite, Snapshot, live_fields
from ._json import decode_document, encode_document, freeze_mapping
from ._redis_client import call_redis, connect, encodable, unknown_outcome
from ._redis_scripts import (
    CREATE,
    DELETE,
    GC_FIELDS,
    GC_SESSIONS,
    PUT,
    RECORD_DELETE,
    RECORD_LIST,
    RECORD_PUT,
    RECORD_PUT_FENCED,
    TOUCH,
    pairs,
    redact_url,
    session_snapshot,
    stored_record,
)
from ._store import DEFAULT_MAX_DOCUMENT_BYTES, BaseStore, record_name, writes_together

if TYPE_CHECKING:
    from redis.asyncio import Redis
    from redis.commands.core import AsyncScript

__all__ = ["RedisStore"]

_T = TypeVar("_T")
_GC_BATCH = 500


class RedisStore(BaseStore):
    """A :class:`StateStore` in Redis, shared by every worker that opens the same URL.

    ``url`` is a redis-py URL (``redis://[:password@]host:port/db``, ``rediss://`` for
    TLS, ``unix:///path/redis.sock``). Keys live under ``{prefix}:`` (the braces keep
    every key of one store in one Redis Cluster slot, so its scripts stay atomic there
    too). Nothing connects until the first operation. When Redis cannot be reached every
    operation raises :class:`StoreUnavailableError` naming the URL (after at most two
    attempts of ``connect_timeout_s``/``socket_timeout_s`` each); the same object works
    again once Redis is back.

    Redis must keep acknowledged writes for the ledger's guarantees to hold across a
    Redis crash: run it with ``appendonly yes`` and ``appendfsync always`` (or accept
    losing up to a second of writes with ``everysec``).

    A session with a TTL also gets a native Redis expiry ``native_ttl_grace_s`` after
    its logical one, which frees its memory even if ``gc`` never runs; visibility is
    always decided from ``clock``, as in the other stores.
    """

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "closedloop",
        clock: Callable[[], float] = time.time,
        max_document_bytes: int = DEFAULT_MAX_DOCUMENT_BYTES,
        socket_timeout_s: float = 5.0,
        connect_timeout_s: float = 2.0,
        native_ttl_grace_s: float = 30.0,
    ) -> None:
        super().__init__(clock=clock, max_document_bytes=max_document_bytes)
        if not isinstance(url, str) or not url.startswith(("redis://", "rediss://", "unix://")):
            raise ConfigurationError(
                "url", url, "must be a redis://, rediss:// or unix:// URL string"
            )
        if not isinstance(prefix, str) or not prefix or "{" in prefix or "}" in prefix:
            raise ConfigurationError("prefix", prefix, "must be a non-empty string without braces")
        encodable("prefix", prefix)
        require_positive("socket_timeout_s", socket_timeout_s)
        require_positive("connect_timeout_s", connect_timeout_s)
        self._grace_ms = int(require_non_negative("native_ttl_grace_s", native_ttl_grace_s) * 1000)
        self._client, self._new_client = connect(
            url, socket_timeout_s=socket_timeout_s, connect_timeout_s=connect_timeout_s
        )
        self.url = url
        self.prefix = prefix
        self._where = redact_url(url)
        self._loop: asyncio.AbstractEventLoop | None = None
        tag = "{" + prefix + "}"
        self._session_prefix = f"{tag}:s:"
        self._expiry_index = f"{tag}:sx"
        self._field_index = f"{tag}:sf"
        self._record_prefix = f"{tag}:r:"
        self._record_index_prefix = f"{tag}:ri:"
        register = self._client.register_script
        self._lua_create: AsyncScript = register(CREATE)
        self._lua_put: AsyncScript = register(PUT)
        self._lua_touch: AsyncScript = register(TOUCH)
        self._lua_delete: AsyncScript = register(DELETE)
        self._lua_gc_sessions: AsyncScript = register(GC_SESSIONS)
        self._lua_gc_fields: AsyncScript = register(GC_FIELDS)
        self._lua_record_put: AsyncScript = register(RECORD_PUT)
        self._lua_record_put_fenced: AsyncScript = register(RECORD_PUT_FENCED)
        self._lua_record_delete: AsyncScript = register(RECORD_DELETE)
        self._lua_record_list: AsyncScript = register(RECORD_LIST)
        self._closed = False

    def __repr__(self) -> str:
        return f"RedisStore({self._where!r}, prefix={self.prefix!r})"

    # --- talking to Redis ------------------------------------------------------------------

    async def _call(self, what: str, fn: Callable[[], Awaitable[_T]]) -> tuple[_T, bool]:
        """Run ``fn`` against Redis; returns its result and whether it had to be sent twice.

        One resend after a dropped connection (see ``call_redis``).
        """
        return await call_redis(fn, what=what, where=self._where, closed=lambda: self._closed)

    def _redis(self) -> Redis:
        """The client for the running event loop.

        redis-py's connections belong to the loop that opened them; a store used from a
        new loop (a second ``asyncio.run``) gets fresh connections instead of hanging.
        """
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            if self._loop is not None:
                self._client = self._new_client()
            self._loop = loop
        return self._client

    def _with_client(self, script: Callable[..., Awaitable[_T]]) -> Awaitable[_T]:
        return script(client=self._redis())

    def _unknown_outcome(self, what: str) -> StoreUnavailableError:
        return unknown_outcome(self._where, what)

    def _session_key(self, session_id: str) -> str:
        return self._session_prefix + encodable("session_id", session_id)

    def _record_keys(self, namespace: str) -> list[str]:
        namespace = encodable("namespace", namespace)
        return [self._record_prefix + namespace, self._record_index_prefix + namespace]

    async def ping(self) -> None:
        """Check that Redis answers; ``StoreUnavailableError`` if it does not."""
        await self._call("ping", lambda: self._redis().ping())

    # --- sessions (the checks are BaseStore's) ------------------------------------------------------------------------

    async def _create(
        self, session_id: str, plain: dict[str, Any], text: str, ttl: float | None
    ) -> Snapshot:
        key = self._session_key(session_id)
        now = self._now()
        expires_at = None if ttl is None else now + ttl
        native_ms = "" if ttl is None else str(min(int(ttl * 1000) + 1 + self._grace_ms, 10**14))
        token = secrets.token_hex(8)
        args = [
            session_id,
            repr(now),
            text,
            "" if ttl is None else repr(ttl),
            "" if expires_at is None else repr(expires_at),
            native_ms,
            token,
        ]
        keys = [key, self._expiry_index, self._field_index]
        answer, resent = await self._call(
            "create", lambda: self._lua_create(keys=keys, args=args, client=self._redis())
        )
        if answer == "exists":
            if resent:
                raise self._unknown_outcome(f"create of session {session_id!r}")
            raise ConfigurationError("session_id", session_id, "a session with this id exists")
        return Snapshot(
            session_id=session_id,
            version=1,
            data=freeze_mapping(plain),
            created_at=now,
            updated_at=now,
            expires_at=expires_at,
        )

    async def _hash(self, key: str) -> dict[str, str]:
        h, _ = await self._call("get", lambda: self._redis().hgetall(key))
        return cast(dict[str, str], h)

    def _not_found(self, session_id: str, status: str, detail: str, now: float) -> Exception:
        if status == "expired":
            return SessionNotFoundError(
                f"session {session_id!r} expired at {float(detail)} (now {now})"
            )
        return SessionNotFoundError(f"session {session_id!r} not found")

    async def _get(self, session_id: str) -> Snapshot:
        key = self._session_key(session_id)
        now = self._now()
        h = await self._hash(key)
        if not h:
            raise self._not_found(session_id, "missing", "", now)
        if h["e"] and now >= float(h["e"]):
            raise self._not_found(session_id, "expired", h["e"], now)
        return session_snapshot(session_id, h, now)

    put_with_records = writes_together(BaseStore.put_with_records)

    async def _put_with_records(
        self, save: SessionWrite, hints: list[RecordWrite], writes: list[RecordWrite]
    ) -> Snapshot:
        # The put and the hints as one atomic script (one round trip): the hints are
        # written only if the put succeeds, and then all of them. The conditional
        # ``writes`` go first, on their own.
        if writes:
            await self._record_put_many(writes)
        return await self._put(save, hints)

    async def _put(self, write: SessionWrite, hints: Sequence[RecordWrite] = ()) -> Snapshot:
        session_id, expected, plain, text, ttls = write
        # One script writes the session and, for put_with_records, its records too.
        keys = [self._session_key(session_id), self._field_index]
        record_args: list[str] = []
        for namespace, key, _, _, value_text in hints:
            keys.extend(self._record_keys(namespace))
            record_args.extend((encodable("key", key), value_text))
        now = self._now()
        token = secrets.token_hex(8)
        args: list[str] = [session_id, repr(now), str(expected), text, token, str(len(plain))]
        args.extend(plain)
        args.append(str(len(ttls)))
        for name, ttl in ttls.items():
            args.extend((name, repr(now + ttl)))
        args.extend(record_args)
        reply, resent = await self._call(
            "put", lambda: self._lua_put(keys=keys, args=args, client=self._redis())
        )
        status, *rest = reply
        if status == "ok":
            return session_snapshot(session_id, pairs(rest), now, plain)
        if status == "again":
            return await self.get(session_id)
        if status == "stale":
            if resent:
                raise self._unknown_outcome(f"put of session {session_id!r}")
            raise self._stale(session_id, expected, int(rest[0]))
        raise self._not_found(session_id, status, rest[0], now)

    async def _touch(self, session_id: str, ttl: float | None) -> Snapshot:
        key = self._session_key(session_id)
        now = self._now()
        args = [session_id, repr(now), "" if ttl is None else repr(ttl), str(self._grace_ms)]
        keys = [key, self._expiry_index]
        reply, _ = await self._call(
            "touch", lambda: self._lua_touch(keys=keys, args=args, client=self._redis())
        )
        status, *rest = reply
        if status != "ok":
            raise self._not_found(session_id, status, rest[0], now)
        return session_snapshot(session_id, pairs(rest), now)

    async def _delete(self, session_id: str) -> bool:
        keys = [self._session_key(session_id), self._expiry_index, self._field_index]
        args = [session_id, repr(self._now())]
        removed, _ = await self._call(
            "delete", lambda: self._lua_delete(keys=keys, args=args, client=self._redis())
        )
        return bool(removed)

    async def _gc(self) -> tuple[int, int]:
        now = self._now()
        sessions = 0
        keys = [self._expiry_index, self._field_index]
        args = [repr(now), self._session_prefix, str(_GC_BATCH)]
        while True:
            (removed, seen), _ = await self._call(
                "gc", lambda: self._lua_gc_sessions(keys=keys, args=args, client=self._redis())
            )
            sessions += int(removed)
            if int(seen) < _GC_BATCH or not removed:
                break
        fields = 0
        due, _ = await self._call(
            "gc",
            lambda: self._redis().zrangebyscore(self._field_index, "-inf", repr(now)),
        )
        for session_id in cast(list[str], due):
            fields += await self._gc_session_fields(session_id, now)
        return sessions, fields

    async def _gc_session_fields(self, session_id: str, now: float) -> int:
        key = self._session_prefix + session_id
        for _ in range(8):  # a session written while we look is read again
            h = await self._hash(key)
            if not h or (h["e"] and now >= float(h["e"])):
                return 0
            field_expires = {k[2:]: float(at) for k, at in h.items() if k.startswith("f:")}
            live = live_fields(field_expires, now)
            gone = sorted(field_expires.keys() - live.keys())
            data = {k: v for k, v in decode_document(h["d"]).items() if k not in gone}
            next_at = min(live.values()) if live else None
            args = [
                session_id,
                h["o"],
                secrets.token_hex(8),
                encode_document(data),
                "" if next_at is None else repr(next_at),
                *gone,
            ]
            script = functools.partial(
                self._lua_gc_fields, keys=[key, self._field_index], args=args
            )
            dropped, _ = await self._call("gc", functools.partial(self._with_client, script))
            if int(dropped) != -1:
                return max(0, int(dropped))
        return 0

    # --- records -------------------------------------------------------------------------

    async def _record_get(self, namespace: str, key: str) -> Record | None:
        table = self._record_keys(namespace)[0]
        field = encodable("key", key)
        stored, _ = await self._call(
            "record_get",
            lambda: self._redis().hget(table, field),
        )
        return None if stored is None else stored_record(namespace, key, cast(str, stored))

    async def _record_put(self, write: RecordWrite) -> Record:
        expected = write.expected

        def stale(name: str, detail: str) -> ClosedLoopError:
            assert expected is not None  # an unconditional write is never refused
            return self._stale(name, expected, int(detail) if detail else None)

        guard = ["" if expected is None else str(expected)]
        return await self._write_record("record_put", self._lua_record_put, write, guard, stale)

    async def _record_put_fenced(self, write: RecordWrite, fence: str, token: int) -> Record:
        def fenced(name: str, detail: str) -> ClosedLoopError:
            return self._fenced(name, token, int(detail))

        guard = [encodable("fence", fence), str(token)]
        return await self._write_record(
            "record_put_fenced", self._lua_record_put_fenced, write, guard, fenced
        )

    async def _write_record(
        self,
        op: str,
        script: AsyncScript,
        write: RecordWrite,
        guard: list[str],
        refused: Callable[[str, str], ClosedLoopError],
    ) -> Record:
        """One record write by ``script`` under its ``guard`` (the expected version, or the
        fence and token); the script's refusal becomes ``refused(name, detail)``, unless
        the call was sent twice (the first may have written: the outcome is unknown)."""
        namespace, key, _, plain, text = write
        keys = self._record_keys(namespace)
        now = self._now()
        args = [encodable("key", key), *guard, repr(now), secrets.token_hex(8), text]
        reply, resent = await self._call(
            op, lambda: script(keys=keys, args=args, client=self._redis())
        )
        status, detail = reply  # "ok", or "again": a resent write found already done
        if status in ("stale", "fenced"):
            name = record_name(namespace, key)
            if resent:
                raise self._unknown_outcome(f"{op} of {name!r}")
            raise refused(name, detail)
        return Record(
            namespace=namespace,
            key=key,
            version=int(detail),
            value=freeze_mapping(plain),
            updated_at=now,
        )

    async def _record_list(self, namespace: str, prefix: str) -> list[Record]:
        keys = self._record_keys(namespace)
        # Byte order of UTF-8 is code point order, and no UTF-8 byte is 0xff: every key
        # starting with the prefix sorts in [prefix, prefix + b"\xff").
        if prefix:
            raw = encodable("prefix", prefix).encode("utf-8")
            bounds: list[bytes | str] = [b"[" + raw, b"(" + raw + b"\xff"]
        else:
            bounds = ["-", "+"]
        flat, _ = await self._call(
            "record_list",
            lambda: self._lua_record_list(keys=keys, args=bounds, client=self._redis()),
        )
        return [stored_record(namespace, k, v) for k, v in pairs(flat).items()]

    async def _record_delete(self, namespace: str, key: str) -> bool:
        keys = self._record_keys(namespace)
        args = [encodable("key", key)]
        removed, _ = await self._call(
            "record_delete",
            lambda: self._lua_record_delete(keys=keys, args=args, client=self._redis()),
        )
        return bool(removed)

    async def close(self) -> None:
        """Close the connections. Idempotent; later operations raise ``StoreUnavailableError``."""
        if self._closed:
            return
        self._closed = True
        if self._loop is not None and self._loop is not asyncio.get_running_loop():
            return  # its connections died with the loop that opened them
        with contextlib.suppress(OSError):  # closing a connection to a dead server is fine
            await self._client.aclose()
