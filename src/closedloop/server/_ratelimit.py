"""Per-key rate limiting: one token bucket per API key, on an injectable clock.

Each worker process keeps its own buckets, so with N workers a key may reach N times
its rate; the limit exists to keep one client from starving the others on a worker,
not as a billing meter.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from .._validation import require_int_at_least, require_positive

__all__ = ["RateLimit", "RateLimiter", "TokenBucket"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RateLimit:
    """``rate_per_s`` requests a second on average, bursts of up to ``burst``."""

    rate_per_s: float = 20.0
    burst: int = 40

    def __post_init__(self) -> None:
        require_positive("rate_per_s", self.rate_per_s)
        require_int_at_least("burst", self.burst, 1)


class TokenBucket:
    """``capacity`` tokens, refilled at ``refill_per_s``; a request takes one.

    :meth:`take` returns 0.0 when the request may go ahead, else the seconds until a token
    will be there (the ``Retry-After``), leaving the bucket as it was.
    """

    def __init__(
        self, capacity: int, refill_per_s: float, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.capacity = require_int_at_least("capacity", capacity, 1)
        self.refill_per_s = require_positive("refill_per_s", refill_per_s)
        self._clock = clock
        self._tokens = float(capacity)
        self._updated = clock()

    def __repr__(self) -> str:
        return f"TokenBucket(capacity={self.capacity}, refill_per_s={self.refill_per_s})"

    @property
    def tokens(self) -> float:
        """Tokens available now."""
        self._refill()
        return self._tokens

    def _refill(self) -> None:
        now = self._clock()
        # A clock that steps back must not mint tokens or freeze the bucket.
        elapsed = max(0.0, now - self._updated)
        self._tokens = min(float(self.capacity), self._tokens + elapsed * self.refill_per_s)
        self._updated = now

    def take(self, cost: float = 1.0) -> float:
        """Take ``cost`` tokens; 0.0 if taken, else the wait until they would be there."""
        self._refill()
        if self._tokens >= cost:
            self._tokens -= cost
            return 0.0
        return (cost - self._tokens) / self.refill_per_s


class RateLimiter:
    """One :class:`TokenBucket` per key, the least recently used dropped past ``max_keys``.

    A dropped key starts again with a full bucket, which only ever errs on the side of
    letting a request through.
    """

    def __init__(
        self,
        limit: RateLimit | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_keys: int = 10_000,
    ) -> None:
        self.limit = limit if limit is not None else RateLimit()
        self._clock = clock
        self._max_keys = require_int_at_least("max_keys", max_keys, 1)
        self._buckets: OrderedDict[str, TokenBucket] = OrderedDict()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"RateLimiter({self.limit!r}, keys={len(self._buckets)})"

    def check(self, key: str) -> float:
        """Spend one request of ``key``: 0.0 if allowed, else seconds to wait."""
        with self._lock:
            bucket = self._buckets.get(key)
            if bucket is None:
                bucket = TokenBucket(self.limit.burst, self.limit.rate_per_s, clock=self._clock)
                self._buckets[key] = bucket
                if len(self._buckets) > self._max_keys:
                    self._buckets.popitem(last=False)
            else:
                self._buckets.move_to_end(key)
            return bucket.take()


def retry_after_header(wait_s: float) -> str:
    """``Retry-After`` is whole seconds; round up so a client that obeys it is let in."""
    return str(max(1, math.ceil(wait_s)))
