"""Each tool's health inside the loop: a circuit breaker and its measured latency.

A service that is down is not a service that hiccuped: retrying it burns the attempt
budget and the deadline on calls that cannot succeed. With :class:`HealthSettings` the
loop keeps, per tool and across the runs of one agent, a circuit breaker (Nygard 2007:
``failure_threshold`` calls in a row that end in a passing fault (after their retries) open it; after ``recovery_s`` one probe call
is let through) and a window of measured latencies whose 95th percentile sets the tool's
timeout (``headroom`` × p95, within ``[min_timeout_s, max_timeout_s]``) once
``min_samples`` calls are in, in place of the timeout scheduled from the control signal.
A call to an open breaker is not made: the model reads that the tool was not run and why.
With ``refuse_open=False`` the breakers are kept all the same (their state is in
:meth:`ToolHealth.snapshot`) but no call is refused: the same estimate, not acted on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .._exceptions import ConfigurationError
from .._validation import require_int_at_least, require_non_negative, require_positive
from ..control import LatencyTracker
from ..feedback import CircuitBreaker, CircuitState

__all__ = ["HealthSettings", "ToolHealth"]


@dataclass(frozen=True, slots=True, kw_only=True)
class HealthSettings:
    """How the loop tracks each tool's health (see the module)."""

    failure_threshold: int = 3
    recovery_s: float = 30.0
    latency_window: int = 20
    min_samples: int = 5
    headroom: float = 3.0
    min_timeout_s: float = 0.2
    max_timeout_s: float = 30.0
    refuse_open: bool = True

    def __post_init__(self) -> None:
        require_int_at_least("failure_threshold", self.failure_threshold, 1)
        if not isinstance(self.refuse_open, bool):
            raise ConfigurationError("refuse_open", self.refuse_open, "must be True or False")
        require_positive("recovery_s", self.recovery_s)
        require_int_at_least("latency_window", self.latency_window, 1)
        require_int_at_least("min_samples", self.min_samples, 1)
        if self.min_samples > self.latency_window:
            raise ConfigurationError(
                "min_samples",
                self.min_samples,
                f"must be <= latency_window ({self.latency_window})",
            )
        require_positive("headroom", self.headroom)
        require_non_negative("min_timeout_s", self.min_timeout_s)
        require_positive("max_timeout_s", self.max_timeout_s)
        if self.min_timeout_s > self.max_timeout_s:
            raise ConfigurationError(
                "min_timeout_s",
                self.min_timeout_s,
                f"must be <= max_timeout_s ({self.max_timeout_s})",
            )


class ToolHealth:
    """Breakers and latency windows by tool name, on the agent's clock (one per agent)."""

    def __init__(self, settings: HealthSettings, clock: Callable[[], float]) -> None:
        self.settings = settings
        self._clock = clock
        self._breakers: dict[str, CircuitBreaker] = {}
        self._latency: dict[str, LatencyTracker] = {}
        self._tripped: dict[str, str] = {}  # tool -> why its breaker was opened from outside

    def breaker(self, tool: str) -> CircuitBreaker:
        found = self._breakers.get(tool)
        if found is None:
            s = self.settings
            found = CircuitBreaker(
                tool,
                failure_threshold=s.failure_threshold,
                recovery_timeout_s=s.recovery_s,
                clock=self._clock,
            )
            self._breakers[tool] = found
        return found

    def _tracker(self, tool: str) -> LatencyTracker:
        found = self._latency.get(tool)
        if found is None:
            s = self.settings
            found = LatencyTracker(window=s.latency_window, min_samples=s.min_samples)
            self._latency[tool] = found
        return found

    def refused(self, tool: str) -> str | None:
        """Why a call to ``tool`` is not made now (its breaker is open and open breakers
        refuse calls), or None."""
        breaker = self.breaker(tool)
        if not self.settings.refuse_open or breaker.state is not CircuitState.OPEN:
            return None
        wait = max(0.0, (breaker.retry_at or self._clock()) - self._clock())
        tripped = self._tripped.get(tool)
        down = (
            f"{tool} failed {self.settings.failure_threshold} times in a row and is taken as down"
            if tripped is None
            else f"{tool} is taken as down: {tripped}"
        )
        return f"{down}; it is tried again in {wait:.0f} s"

    def timeout_s(self, tool: str) -> float | None:
        """The timeout the measured latency gives ``tool``, or None until it has samples."""
        tracker = self._tracker(tool)
        if len(tracker.samples) < tracker.min_samples:
            return None
        s = self.settings
        return min(s.max_timeout_s, max(s.min_timeout_s, tracker.p95() * s.headroom))

    def record_latency(self, tool: str, latency_s: float) -> None:
        """One attempt's measured latency."""
        self._tracker(tool).record(max(0.0, latency_s))

    def record_call(self, tool: str, *, failed: bool) -> None:
        """How one call ended, after its retries: a passing fault counts against the
        breaker. A call, not an attempt: three attempts of one unlucky call are not three
        pieces of evidence that the service is down."""
        breaker = self.breaker(tool)
        if failed:
            breaker.record_failure()
        else:
            breaker.record_success()
            self._tripped.pop(tool, None)

    def trip(self, tool: str, reason: str) -> None:
        """Open ``tool``'s breaker now, for ``reason`` (a healing action said the service is
        down); it lets a probe through after ``recovery_s`` like one opened by the count."""
        self._tripped[tool] = reason
        self.breaker(tool).trip()

    def snapshot(self) -> dict[str, dict[str, object]]:
        """Each tool's breaker state and p95 latency, for a report."""
        return {
            name: {
                "breaker": self.breaker(name).state.value,
                "p95_s": self._tracker(name).p95(),
                "timeout_s": self.timeout_s(name),
            }
            for name in sorted(set(self._breakers) | set(self._latency))
        }
