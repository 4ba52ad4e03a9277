"""How ``RedisStore`` talks to Redis: building the client, one resend, failures as our errors.

redis-py stays an optional dependency: it is imported when a store is built, and a
missing install is a ``ConfigurationError`` that says what to install. Every failure to
reach Redis, or a command Redis refuses, becomes a ``StoreUnavailableError`` naming the
URL with its password redacted.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from .._exceptions import ConfigurationError, StoreUnavailableError
from ._redis_scripts import redact_url

if TYPE_CHECKING:
    from redis.asyncio import Redis

__all__ = ["call_redis", "connect", "encodable", "unknown_outcome"]

_T = TypeVar("_T")


def encodable(argument: str, value: str) -> str:
    """``value``, if Redis can hold it; ``ConfigurationError`` naming ``argument`` if not."""
    # Redis keys are bytes: a lone surrogate has no UTF-8 form.
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ConfigurationError(argument, value, "must be valid Unicode") from None
    return value


def connect(
    url: str, *, socket_timeout_s: float, connect_timeout_s: float
) -> tuple[Redis, Callable[[], Redis]]:
    """A client for ``url`` (no connection is opened yet) and a factory of fresh ones."""
    try:
        from redis.asyncio import Redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry
    except ImportError:
        raise ConfigurationError(
            "url",
            redact_url(url),
            "RedisStore needs redis-py: pip install 'closedloop[redis]'",
        ) from None
    # redis-py's own retries are off: a write resent after a lost reply must go through
    # call_redis, which knows whether a repeat can be told apart from a conflict.
    options: dict[str, Any] = {
        "decode_responses": True,
        "socket_timeout": socket_timeout_s,
        "socket_connect_timeout": connect_timeout_s,
        "retry": Retry(NoBackoff(), 0),
    }
    try:
        client: Redis = Redis.from_url(url, **options)
    except (ValueError, TypeError) as exc:
        raise ConfigurationError("url", redact_url(url), f"not a usable Redis URL: {exc}") from None
    return client, lambda: Redis.from_url(url, **options)


async def call_redis(
    fn: Callable[[], Awaitable[_T]], *, what: str, where: str, closed: Callable[[], bool]
) -> tuple[_T, bool]:
    """Run ``fn`` against Redis; returns its result and whether it had to be sent twice.

    One resend after a dropped connection: every write carries a token, so a script
    that already ran the first time answers "again" instead of a conflict. ``closed``
    is asked before each attempt's verdict, since the store may be closed meanwhile.
    """
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import RedisError
    from redis.exceptions import TimeoutError as RedisTimeoutError

    if closed():
        raise StoreUnavailableError(f"redis store {where} is closed")
    for attempt in (0, 1):
        try:
            return await fn(), attempt > 0
        except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
            if attempt == 0 and not closed():
                continue
            raise StoreUnavailableError(
                f"redis store {where}: cannot reach Redis during {what} ({exc}); "
                "check that the server is running, then retry"
            ) from exc
        except RedisError as exc:
            raise StoreUnavailableError(
                f"redis store {where}: Redis refused {what} ({exc})"
            ) from exc
    raise AssertionError("unreachable")


def unknown_outcome(where: str, what: str) -> StoreUnavailableError:
    """The error for a write whose reply was lost and whose effect cannot be told."""
    return StoreUnavailableError(
        f"redis store {where}: the connection dropped during {what} and the write "
        "may or may not have been applied; read the current state before retrying"
    )
