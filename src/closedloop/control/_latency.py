"""Latency tracking and a timeout from the recent latency percentiles ("predictive fallback")."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from typing import Any

from .._exceptions import ConfigurationError
from .._validation import (
    require_int_at_least,
    require_non_negative,
    require_positive,
)

__all__ = ["LatencyTracker"]


def _percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default ``percentile`` method)."""
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    frac = pos - lo
    return ordered[lo] + (ordered[hi] - ordered[lo]) * frac


class LatencyTracker:
    """p95 latency over a sliding window, and a timeout that adapts to it.

    ``record(latency_s)`` after every call; :meth:`p95` is ``default_s`` until
    ``min_samples`` latencies are in the window. :meth:`dynamic_timeout` then picks:

    * when p95 is above ``slow_threshold_s`` (the service is degraded), fail fast:
      ``min(cap_s, p95·factor)``, so the caller falls back to a cache or default sooner
      rather than waiting on a call that will probably be slow anyway;
    * otherwise leave room above the typical latency: ``max(floor_s, p95·headroom)``.

    Times are in seconds and measured by the caller; nothing here reads a clock.
    """

    def __init__(
        self,
        window: int = 10,
        default_s: float = 2.0,
        min_samples: int = 5,
        *,
        slow_threshold_s: float = 5.0,
    ) -> None:
        self.window = require_int_at_least("window", window, 1)
        self.default_s = require_non_negative("default_s", default_s)
        self.min_samples = require_int_at_least("min_samples", min_samples, 1)
        if self.min_samples > self.window:
            raise ConfigurationError(
                "min_samples", min_samples, f"must be <= window ({self.window})"
            )
        self.slow_threshold_s = require_non_negative("slow_threshold_s", slow_threshold_s)
        self._samples: deque[float] = deque(maxlen=self.window)

    @property
    def samples(self) -> tuple[float, ...]:
        """The latencies in the window, oldest first."""
        return tuple(self._samples)

    def reset(self) -> None:
        """Forget every latency."""
        self._samples.clear()

    def state(self) -> dict[str, Any]:
        """A JSON-ready snapshot: settings and the window. :meth:`from_state` inverts it."""
        return {
            "window": self.window,
            "default_s": self.default_s,
            "min_samples": self.min_samples,
            "slow_threshold_s": self.slow_threshold_s,
            "samples": list(self._samples),
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> LatencyTracker:
        """Rebuild a tracker from :meth:`state`, with the same window of latencies."""
        try:
            tracker = cls(
                state["window"],
                state["default_s"],
                state["min_samples"],
                slow_threshold_s=state["slow_threshold_s"],
            )
            samples = state["samples"]
        except (KeyError, TypeError):
            raise ConfigurationError(
                "state", state, "must be a mapping as LatencyTracker.state() returns"
            ) from None
        tracker.load(samples)
        return tracker

    def load(self, samples: Any) -> None:
        """Replace the window with ``samples`` (oldest first; the newest ``window`` are kept)."""
        if isinstance(samples, str | bytes) or not isinstance(samples, list | tuple):
            raise ConfigurationError("samples", samples, "must be a list of latencies")
        checked = [require_non_negative("samples", s) for s in samples]
        self._samples.clear()
        self._samples.extend(checked)

    def record(self, latency_s: float) -> None:
        """Add one observed latency (seconds, ≥ 0)."""
        self._samples.append(require_non_negative("latency_s", latency_s))

    def p95(self) -> float:
        """95th percentile of the window, or ``default_s`` until ``min_samples``."""
        if len(self._samples) < self.min_samples:
            return self.default_s
        return _percentile(list(self._samples), 95.0)

    @property
    def degraded(self) -> bool:
        """True when p95 is above ``slow_threshold_s``."""
        return self.p95() > self.slow_threshold_s

    def dynamic_timeout(
        self,
        cap_s: float = 3.0,
        factor: float = 0.6,
        slow_threshold_s: float | None = None,
        headroom: float = 2.0,
        floor_s: float = 0.05,
    ) -> float:
        """The timeout for the next call; ``slow_threshold_s`` defaults to the tracker's."""
        cap_s = require_positive("cap_s", cap_s)
        factor = require_positive("factor", factor)
        slow = (
            self.slow_threshold_s
            if slow_threshold_s is None
            else require_non_negative("slow_threshold_s", slow_threshold_s)
        )
        headroom = require_positive("headroom", headroom)
        floor_s = require_non_negative("floor_s", floor_s)
        p95 = self.p95()
        if p95 > slow:
            return min(cap_s, p95 * factor)
        return max(floor_s, p95 * headroom)

    def __repr__(self) -> str:
        return (
            f"LatencyTracker(window={self.window}, default_s={self.default_s!r}, "
            f"min_samples={self.min_samples}, samples={len(self._samples)})"
        )
