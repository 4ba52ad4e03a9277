"""The store the effect ledger writes through: the records part of a state store.

A structural subset of ``closedloop.feedback.StateStore`` (any state store satisfies it),
spelled here so that execution imports nothing of feedback.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

__all__ = ["FencedStore", "RecordStore", "StoredRecord"]


class StoredRecord(Protocol):
    """The part of ``closedloop.feedback.Record`` the ledger reads."""

    @property
    def key(self) -> str: ...
    @property
    def version(self) -> int: ...
    @property
    def value(self) -> Mapping[str, Any]: ...


class RecordStore(Protocol):
    """The Records API of ``closedloop.feedback.StateStore``; any StateStore satisfies it."""

    # The signatures repeat StateStore's on purpose: a structural subset keeps execution
    # free of any import of feedback.

    async def record_get(self, namespace: str, key: str) -> StoredRecord | None:
        """The record, or None if there is none."""

    async def record_put(
        self,
        namespace: str,
        key: str,
        value: Mapping[str, Any],
        *,
        expected_version: int | None = None,
    ) -> StoredRecord:
        """Write a record: unconditionally (None), only if absent (0), or only at version N."""

    async def record_list(self, namespace: str, prefix: str = "") -> Sequence[StoredRecord]:
        """Records of ``namespace`` whose key starts with ``prefix``, ordered by key."""


class FencedStore(Protocol):
    """A store that can compare-and-set on a fencing token (``BaseStore.record_put_fenced``)."""

    async def record_put_fenced(
        self,
        namespace: str,
        key: str,
        value: Mapping[str, Any],
        *,
        token: int,
        fence: str = "fence",
    ) -> Any: ...
