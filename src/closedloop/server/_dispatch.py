"""The durable run queue: Redis Streams with one consumer group shared by every worker.

Submitting a run appends an entry (``XADD``) naming the run's record; each worker reads
entries for itself (``XREADGROUP``) and executes them. An entry a worker has read stays in
the group's pending-entries list, owned by that worker, until the run ends (``XACK``). A
worker that is alive touches its entries every ``heartbeat_s`` (``XCLAIM`` to itself with
``JUSTID``, which resets their idle time), so an entry idle for longer than
``takeover_after_s`` belongs to a worker that died or hung: any live worker takes it over
with ``XAUTOCLAIM`` and continues the run through recovery. That is the consumer-group
protocol of Redis Streams, used as it is; no lease table of our own.

A takeover therefore happens within ``takeover_after_s + heartbeat_s`` of the last sign
of life (with the defaults, 15 s + 3 s, inside 30 s).
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._exceptions import ConfigurationError, StoreUnavailableError
from .._validation import require_positive
from ..feedback._redis_scripts import redact_url

if TYPE_CHECKING:
    from redis.asyncio import Redis

__all__ = ["QueuedRun", "RunQueue", "consumer_name"]

DEFAULT_STREAM = "closedloop:runs"
DEFAULT_GROUP = "workers"


def consumer_name() -> str:
    """This process's consumer name in the group: ``<host>:<pid>``."""
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass(frozen=True, slots=True)
class QueuedRun:
    """One entry of the queue: which run to execute, and whether it was taken over.

    ``scope`` is the store scope of the key that started the run (``""`` for the shared
    store); ``key`` is the run record's key; ``taken_over`` says the entry came from a
    consumer that stopped answering; ``at`` is when it was read (the queue's clock).
    """

    entry_id: str
    scope: str
    key: str
    taken_over: bool
    at: float


class RunQueue:
    """A run queue on a Redis stream and consumer group (see the module docstring)."""

    def __init__(
        self,
        url: str,
        *,
        stream: str = DEFAULT_STREAM,
        group: str = DEFAULT_GROUP,
        consumer: str | None = None,
        takeover_after_s: float = 15.0,
        heartbeat_s: float = 3.0,
        block_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not isinstance(url, str) or not url.startswith(("redis://", "rediss://", "unix://")):
            raise ConfigurationError("queue", url, "must be a redis:// (or rediss://) URL")
        require_positive("takeover_after_s", takeover_after_s)
        require_positive("heartbeat_s", heartbeat_s)
        require_positive("block_s", block_s)
        if heartbeat_s >= takeover_after_s:
            raise ConfigurationError(
                "heartbeat_s",
                heartbeat_s,
                f"must be shorter than takeover_after_s ({takeover_after_s}), or a live "
                "worker's runs would be taken from it",
            )
        self.url = url
        self.stream = stream
        self.group = group
        self.consumer = consumer or consumer_name()
        self.takeover_after_s = takeover_after_s
        self.heartbeat_s = heartbeat_s
        self.block_s = block_s
        self._clock = clock
        self._client: Redis | None = None
        self._reader: Redis | None = None

    def __repr__(self) -> str:
        return (
            f"RunQueue({redact_url(self.url)!r}, stream={self.stream!r}, "
            f"consumer={self.consumer!r})"
        )

    def _connect(self) -> Redis:
        try:
            from redis.asyncio import Redis
        except ImportError:
            raise ConfigurationError(
                "queue", redact_url(self.url), "needs redis-py: pip install 'closedloop[redis]'"
            ) from None
        client: Redis = Redis.from_url(
            self.url, decode_responses=True, socket_timeout=self.block_s + 10.0
        )
        return client

    async def open(self) -> None:
        """Connect and create the group (and the stream) if they do not exist yet."""
        from redis.exceptions import RedisError, ResponseError

        if self._client is not None:
            return
        self._client, self._reader = self._connect(), self._connect()
        try:
            await self._client.xgroup_create(self.stream, self.group, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):  # the group exists: another worker made it
                raise self._unavailable(exc) from None
        except RedisError as exc:
            raise self._unavailable(exc) from None

    def _unavailable(self, exc: BaseException) -> StoreUnavailableError:
        return StoreUnavailableError(f"run queue {redact_url(self.url)}: {exc}")

    def _require(self) -> Redis:
        if self._client is None:
            raise ConfigurationError("queue", redact_url(self.url), "is not open: await open()")
        return self._client

    async def submit(self, scope: str, key: str) -> str:
        """Append a run to the queue; returns the entry id."""
        entry_id: Any = await self._require().xadd(self.stream, {"scope": scope, "key": key})
        return str(entry_id)

    def _entries(self, raw: Sequence[Any], taken_over: bool) -> list[QueuedRun]:
        now = self._clock()
        found = []
        for entry_id, fields in raw:
            if not fields:  # deleted under the group: nothing to run
                continue
            found.append(
                QueuedRun(
                    entry_id=str(entry_id),
                    scope=str(fields.get("scope", "")),
                    key=str(fields.get("key", "")),
                    taken_over=taken_over,
                    at=now,
                )
            )
        return found

    async def read(self, count: int = 1) -> list[QueuedRun]:
        """New entries for this consumer (waits up to ``block_s`` for one)."""
        assert self._reader is not None, "open() first"
        self._require()
        replies: Any = await self._reader.xreadgroup(
            self.group,
            self.consumer,
            {self.stream: ">"},
            count=count,
            block=int(self.block_s * 1000),
        )
        entries: list[QueuedRun] = []
        for _stream, raw in replies or []:
            entries += self._entries(raw, taken_over=False)
        return entries

    async def reclaim(self, count: int = 16) -> list[QueuedRun]:
        """Entries idle past ``takeover_after_s``, now owned by this consumer (``XAUTOCLAIM``)."""
        client = self._require()
        idle_ms = int(self.takeover_after_s * 1000)
        entries: list[QueuedRun] = []
        cursor = "0-0"
        for _ in range(64):  # bounded: one pass over the pending list
            reply = await client.xautoclaim(
                self.stream, self.group, self.consumer, idle_ms, start_id=cursor, count=count
            )
            cursor, raw = str(reply[0]), reply[1]
            deleted = reply[2] if len(reply) > 2 else []
            if deleted:  # entries gone from the stream: nothing left to run for them
                await client.xack(self.stream, self.group, *deleted)
            entries += self._entries(raw, taken_over=True)
            if cursor == "0-0":
                break
        return entries

    async def owned(self) -> set[str]:
        """The entries this consumer holds now, per the group's pending-entries list."""
        reply: Any = await self._require().xpending_range(
            self.stream, self.group, min="-", max="+", count=10_000, consumername=self.consumer
        )
        return {str(item["message_id"]) for item in reply}

    async def touch(self, entry_ids: Sequence[str]) -> list[str]:
        """Reset the idle time of entries this consumer still holds: it is alive.

        Returns the entries it no longer holds: another worker took them over while this
        one was silent, and the runs they name are that worker's now.
        """
        if not entry_ids:
            return []
        owned = await self.owned()
        mine: list[Any] = [entry for entry in entry_ids if entry in owned]
        if mine:
            await self._require().xclaim(
                self.stream, self.group, self.consumer, 0, mine, justid=True
            )
        return [entry for entry in entry_ids if entry not in owned]

    async def owner(self, entry_id: str) -> str | None:
        """The consumer holding ``entry_id`` now (None once acknowledged)."""
        reply = await self._require().xpending_range(
            self.stream, self.group, min=entry_id, max=entry_id, count=1
        )
        return str(reply[0]["consumer"]) if reply else None

    async def ack(self, entry_id: str) -> None:
        """The run ended (or needs nobody): drop its entry."""
        client = self._require()
        await client.xack(self.stream, self.group, entry_id)
        await client.xdel(self.stream, entry_id)

    async def close(self) -> None:
        """Close the connections."""
        for client in (self._client, self._reader):
            if client is not None:
                await client.aclose()
        self._client = self._reader = None
