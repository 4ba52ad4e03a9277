"""Client-side throttling, a retry budget and Retry-After, on the caller's clock.

- :class:`ClientThrottle`: Google SRE book, ch. 21 ("Handling Overload"): over a sliding
  window, reject locally with probability max(0, (requests − K·accepts) / (requests + 1)),
  K = 2 by default, so a client whose provider refuses most calls sends fewer of them.
- :class:`RetryBudget`: a per-provider budget (Finagle's ``RetryBudget``; SRE ch. 22):
  each first attempt deposits ``ratio`` of a retry, each retry withdraws one, with a floor
  of ``min_per_s`` retries a second so a quiet client can still retry.
- :class:`Cooldown`: Retry-After honoured for every caller of one provider: no attempt
  before the latest instant a provider named.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from .._exceptions import ConfigurationError
from .._validation import require_non_negative, require_positive

__all__ = ["ClientThrottle", "Cooldown", "RetryBudget", "RetryBudgetConfig", "ThrottleConfig"]


@dataclass(frozen=True)
class ThrottleConfig:
    """SRE adaptive throttling: multiplier ``k``, the window it counts over, and the
    fewest requests in the window before it rejects anything (with one refusal out of one
    request the formula says 0.5: too little evidence for a quiet client)."""

    k: float = 2.0
    window_s: float = 60.0
    min_requests: int = 0

    def __post_init__(self) -> None:
        if self.k < 1.0:
            raise ConfigurationError("k", self.k, "must be >= 1 (K = 1 rejects at any loss)")
        require_positive("window_s", self.window_s)
        if isinstance(self.min_requests, bool) or not isinstance(self.min_requests, int):
            raise ConfigurationError("min_requests", self.min_requests, "must be an integer")
        require_non_negative("min_requests", self.min_requests)


class ClientThrottle:
    """Counts requests and accepts per second over the window; see the module docstring."""

    def __init__(self, config: ThrottleConfig | None = None) -> None:
        self.config = config or ThrottleConfig()
        self._events: deque[tuple[float, bool]] = deque()
        self._requests = 0
        self._accepts = 0

    def _expire(self, now: float) -> None:
        horizon = now - self.config.window_s
        while self._events and self._events[0][0] <= horizon:
            _, accepted = self._events.popleft()
            self._requests -= 1
            self._accepts -= accepted

    def record(self, now: float, *, accepted: bool) -> None:
        """One request the provider answered: ``accepted`` unless it refused (429/503)."""
        self._expire(now)
        self._events.append((now, accepted))
        self._requests += 1
        self._accepts += accepted

    def reject_probability(self, now: float) -> float:
        """max(0, (requests − K·accepts) / (requests + 1)) over the window ending at ``now``."""
        self._expire(now)
        if self._requests < self.config.min_requests:
            return 0.0
        return max(0.0, (self._requests - self.config.k * self._accepts) / (self._requests + 1))

    def should_reject(self, now: float, draw: float) -> bool:
        """Reject locally when ``draw`` (uniform in [0, 1), the caller's RNG) falls below p."""
        return draw < self.reject_probability(now)


@dataclass(frozen=True)
class RetryBudgetConfig:
    """Retries as a share of first attempts, a per-second floor and a cap on the balance."""

    ratio: float = 0.1
    min_per_s: float = 1.0
    cap: float = 20.0

    def __post_init__(self) -> None:
        require_non_negative("ratio", self.ratio)
        require_non_negative("min_per_s", self.min_per_s)
        require_positive("cap", self.cap)


class RetryBudget:
    """A token balance: deposits on first attempts and with time, one token per retry."""

    def __init__(self, config: RetryBudgetConfig | None = None, start: float = 0.0) -> None:
        self.config = config or RetryBudgetConfig()
        self._balance = self.config.cap
        self._last = start

    def _refill(self, now: float) -> None:
        if now > self._last:
            self._balance = min(
                self.config.cap, self._balance + (now - self._last) * self.config.min_per_s
            )
            self._last = now

    def on_first_attempt(self, now: float) -> None:
        """A new request (not a retry) was sent: deposit ``ratio``."""
        self._refill(now)
        self._balance = min(self.config.cap, self._balance + self.config.ratio)

    def try_retry(self, now: float) -> bool:
        """Withdraw one retry if the balance holds one; False means fail rather than retry."""
        self._refill(now)
        if self._balance >= 1.0:
            self._balance -= 1.0
            return True
        return False

    def balance(self, now: float) -> float:
        """The retries the budget holds at ``now``, after its refill."""
        self._refill(now)
        return self._balance


class Cooldown:
    """The latest instant any Retry-After named; attempts wait until it has passed."""

    def __init__(self) -> None:
        self.until = 0.0

    def honour(self, now: float, retry_after_s: float) -> None:
        """A provider answered ``Retry-After: retry_after_s`` at ``now``."""
        require_non_negative("retry_after_s", retry_after_s)
        self.until = max(self.until, now + retry_after_s)

    def wait_s(self, now: float) -> float:
        """Seconds to wait before the next attempt (0 when none is named)."""
        return max(0.0, self.until - now)
