"""The records half of the state store interface, spelled once for every package.

A record is a small keyed document beside the sessions (an effect ledger entry, a
handover item, a controller's history). The effect ledger in ``execution/`` writes through
this protocol and the stores in ``feedback/`` implement it (their ``StateStore`` protocol
extends it with the sessions), so the ledger needs nothing of ``feedback`` and the
signatures are written here alone. ``R_co`` is the record a store hands back:
``feedback.Record`` for the state stores, any object with a key, a version and a value for
the ledger.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from typing_extensions import TypeVar

__all__ = ["FencedStore", "RecordStore", "StoredRecord"]


class StoredRecord(Protocol):
    """What any stored record offers: its key, its version and its value."""

    @property
    def key(self) -> str: ...
    @property
    def version(self) -> int: ...
    @property
    def value(self) -> Mapping[str, Any]: ...


R_co = TypeVar("R_co", covariant=True, default=StoredRecord)


class RecordStore(Protocol[R_co]):
    """Keyed records with compare-and-set versions (``version`` is 1 when first written
    and grows by one on every write). Every ``StateStore`` satisfies it."""

    async def record_get(self, namespace: str, key: str) -> R_co | None:
        """The record, or None if there is none."""

    async def record_put(
        self,
        namespace: str,
        key: str,
        value: Mapping[str, Any],
        *,
        expected_version: int | None = None,
    ) -> R_co:
        """Write a record: unconditionally (None), only if absent (0), or only at version N."""

    async def record_list(self, namespace: str, prefix: str = "") -> Sequence[R_co]:
        """Records of ``namespace`` whose key starts with ``prefix``, ordered by key."""

    async def record_delete(self, namespace: str, key: str) -> bool:
        """Remove a record; True if it existed."""


class FencedStore(Protocol[R_co]):
    """A store that compares and sets on a fencing token, not only on the version."""

    async def record_put_fenced(
        self,
        namespace: str,
        key: str,
        value: Mapping[str, Any],
        *,
        token: int,
        fence: str = "fence",
    ) -> R_co:
        """Write a record only if it still carries fencing token ``token``.

        A compare-and-set on the token instead of the version: the stored value's
        ``fence`` field must equal ``token`` (a record or field that is absent counts as
        0), and ``value[fence]`` must be an integer of at least ``token``, so a token never
        goes back. A writer whose token a newer claim replaced gets ``FencedOutError`` and
        nothing is written (fencing tokens: Kleppmann 2016). Atomic in every backend.
        """
