"""The service's settings, and the store named by a URL."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client import CollectorRegistry

from .._exceptions import ConfigurationError
from .._validation import require_int_at_least, require_positive
from ..feedback import MemoryStore, RedisStore, SQLiteStore, StateStore
from ..feedback._paths import default_state_path
from ..models import Model
from ._ratelimit import RateLimit
from ._registry import AgentRegistry

__all__ = ["ServerSettings", "open_store"]


def open_store(url: str | None) -> StateStore:
    """The store a URL names: ``sqlite://PATH`` (``sqlite:///abs/path.db``; bare
    ``sqlite://`` is ``$CLOSEDLOOP_HOME/state.db``; ``?synchronous=NORMAL`` trades the
    fsync per commit for speed, ``?inline_reads=false`` keeps reads on the store's worker
    thread, see ``SQLiteStore``), ``memory://``, or a Redis URL
    (``redis://[:password@]host:port/db``, ``rediss://`` for TLS, ``unix:///path.sock``;
    see ``RedisStore``) that several workers share. None is the SQLite default.
    """
    if url is None:
        return SQLiteStore(default_state_path())
    if not isinstance(url, str):
        raise ConfigurationError("store", url, "must be a URL string")
    if url.startswith("sqlite://"):
        path, _, query = url[len("sqlite://") :].partition("?")
        options = dict(part.partition("=")[::2] for part in query.split("&") if part)
        synchronous = options.pop("synchronous", "FULL").upper()
        inline_reads = options.pop("inline_reads", "true").lower()
        if options:
            raise ConfigurationError("store", url, f"unknown options {sorted(options)}")
        if synchronous not in ("FULL", "NORMAL"):
            raise ConfigurationError("store", url, "synchronous must be FULL or NORMAL")
        if inline_reads not in ("true", "false"):
            raise ConfigurationError("store", url, "inline_reads must be true or false")
        where = Path(path).expanduser() if path else default_state_path()
        return SQLiteStore(
            where,
            synchronous="NORMAL" if synchronous == "NORMAL" else "FULL",
            inline_reads=inline_reads == "true",
        )
    if url in ("memory://", "memory:"):
        return MemoryStore()
    if url.startswith(("redis://", "rediss://", "unix://")):
        # redis-py is imported when the store is built: without it, a ConfigurationError
        # names the ``redis`` extra instead of breaking ``import closedloop.server``.
        return RedisStore(url)
    raise ConfigurationError("store", url, "must start with sqlite://, memory:// or redis://")


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerSettings:
    """Everything ``create_app`` needs; every default suits ``closedloop serve``.

    ``store``: a ``StateStore`` or a URL (:func:`open_store`); the app closes a store it
    opened, never one it was given. ``model``: the model agents run on (a ``Model`` or a
    spec; loaded at the first run). ``registry``: the agents (default: the process-wide
    ``default_registry()``). ``world_url``: the world the reference agents call.
    ``clock`` drives the rate limiter and ``wall_clock`` stamps records: both injectable.
    ``queue``: a Redis URL to dispatch runs through (a stream and consumer group that
    every worker reads; a run whose worker dies is taken over by a live one after
    ``takeover_after_s`` without a ``heartbeat_s`` sign of life); None runs each run in
    the process that received it.
    """

    store: StateStore | str | None = None
    model: Model | str | None = None
    registry: AgentRegistry | None = None
    world_url: str | None = None
    rate_limit: RateLimit = field(default_factory=RateLimit)
    max_body_bytes: int = 256 * 1024
    session_ttl_s: float | None = 86_400.0
    runs_dir: str | Path | None = None
    sse_poll_s: float = 0.5
    sse_keepalive_s: float = 15.0
    gc_interval_s: float | None = 60.0
    shutdown_timeout_s: float = 5.0
    dashboard: bool = True
    metrics_registry: CollectorRegistry | None = None
    clock: Callable[[], float] = time.monotonic
    wall_clock: Callable[[], float] = time.time
    queue: str | None = None
    takeover_after_s: float = 15.0
    heartbeat_s: float = 3.0
    provider_limits: bool = True
    provider_state: str | None = None

    def provider_state_url(self) -> str | None:
        """Where the model's limiter state is shared, or None for in-process."""
        for url in (self.provider_state, self.queue, self.store):
            if isinstance(url, str) and url.startswith(("redis://", "rediss://", "unix://")):
                return url
        return None

    def __post_init__(self) -> None:
        if self.queue is not None and not (
            isinstance(self.queue, str)
            and self.queue.startswith(("redis://", "rediss://", "unix://"))
        ):
            raise ConfigurationError("queue", self.queue, "must be a redis:// URL or None")
        if self.provider_state is not None and not (
            isinstance(self.provider_state, str)
            and self.provider_state.startswith(("redis://", "rediss://", "unix://"))
        ):
            raise ConfigurationError(
                "provider_state", self.provider_state, "must be a redis:// URL or None"
            )
        require_positive("takeover_after_s", self.takeover_after_s)
        require_positive("heartbeat_s", self.heartbeat_s)
        if self.heartbeat_s >= self.takeover_after_s:
            raise ConfigurationError(
                "heartbeat_s", self.heartbeat_s, "must be shorter than takeover_after_s"
            )
        require_int_at_least("max_body_bytes", self.max_body_bytes, 1024)
        if self.session_ttl_s is not None:
            require_positive("session_ttl_s", self.session_ttl_s)
        require_positive("sse_poll_s", self.sse_poll_s)
        require_positive("sse_keepalive_s", self.sse_keepalive_s)
        require_positive("shutdown_timeout_s", self.shutdown_timeout_s)
        if self.gc_interval_s is not None:
            require_positive("gc_interval_s", self.gc_interval_s)
        if self.world_url is not None and not self.world_url.startswith(("http://", "https://")):
            raise ConfigurationError("world_url", self.world_url, "must be an http(s) URL")
        if not isinstance(self.rate_limit, RateLimit):
            raise ConfigurationError("rate_limit", self.rate_limit, "must be a RateLimit")
