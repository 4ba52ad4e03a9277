"""Acceptance thresholds kept across runs, sessions and workers: one record per key.

The risk controller on an acceptance threshold (conformal PID control, Angelopoulos,
Candes and Tibshirani 2023) learns from the outcomes of accepted calls, which arrive after
their runs. Its state must outlive the run, the session and the worker, so it is kept
here, as a small versioned record of the store: a plain dict the controller wrote with
``state()``. An update is read, change, compare-and-set, again on a lost race, so two
workers feeding outcomes at once both count.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .._conflict import retry_on_conflict
from ._contract import StateStore

__all__ = ["THRESHOLD_NAMESPACE", "ThresholdStates"]

THRESHOLD_NAMESPACE = "thresholds"
"""The store namespace the acceptance thresholds live in by default."""

StateFn = Callable[[dict[str, Any] | None], Mapping[str, Any]]


class ThresholdStates:
    """The thresholds' states in ``store`` under ``namespace``, one record per key
    (by convention ``<agent scope>/<tool>``)."""

    def __init__(self, store: StateStore, namespace: str = THRESHOLD_NAMESPACE) -> None:
        self.store = store
        self.namespace = namespace

    async def get(self, key: str) -> dict[str, Any] | None:
        """The stored state of ``key``, or None when nothing was stored yet."""
        record = await self.store.record_get(self.namespace, key)
        return None if record is None else record.to_dict()

    async def update(self, key: str, fn: StateFn, *, attempts: int = 16) -> dict[str, Any]:
        """Store ``fn(current)`` (``current`` None when absent) if nobody wrote in between;
        on a lost race read again and apply ``fn`` to the fresh state. Returns what was
        stored."""

        async def attempt(_: int) -> dict[str, Any]:
            record = await self.store.record_get(self.namespace, key)
            current = None if record is None else record.to_dict()
            new = dict(fn(current))
            expected = 0 if record is None else record.version
            await self.store.record_put(self.namespace, key, new, expected_version=expected)
            return new

        return (await retry_on_conflict(attempt, attempts)).unwrap()
