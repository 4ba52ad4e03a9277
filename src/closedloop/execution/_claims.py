"""Who holds a claim, until when, and under which fencing token.

A ledger claim is a lease (Gray & Cheriton 1989): its ``owner`` (a run, a worker) holds the
effect until ``lease_expires_at``; while the lease is live, a ``pending`` entry means "the
call may be in flight right now", not "abandoned", and nobody else asks the world about it.
Only an expired lease, or the owner itself coming back, may resolve it. Each new claim of
a key takes the next fencing token (Kleppmann 2016, "How to do distributed locking"), and
every write of an owner is a compare-and-set on its token: an owner whose lease ran out and
whose claim was taken over can neither call the action nor record an outcome.
"""

from __future__ import annotations

import os
import secrets
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .._exceptions import ConfigurationError, EffectInFlightError
from .._validation import require_positive
from ._effect import EffectRecord, EffectStatus

__all__ = ["DEFAULT_LEASE_S", "ClaimRules", "default_owner"]

DEFAULT_LEASE_S = 300.0
"""How long a claim is held without news from its owner: longer than any one call of an
irreversible action should take (a call still running past it may be taken over)."""


def default_owner() -> str:
    """A name for a ledger with no owner given: this host and process, and a random tag (two
    ledgers in one process are two owners)."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


@dataclass(frozen=True, slots=True)
class ClaimRules:
    """One ledger's identity and lease: what its claims carry and whom it defers to."""

    owner: str = field(default_factory=default_owner)
    lease_s: float = DEFAULT_LEASE_S
    clock: Callable[[], float] = time.time

    def __post_init__(self) -> None:
        if not isinstance(self.owner, str) or not self.owner:
            raise ConfigurationError("owner", self.owner, "must be a non-empty string")
        require_positive("lease_s", self.lease_s)
        if not callable(self.clock):
            raise ConfigurationError("clock", self.clock, "must be a callable returning seconds")

    def now(self) -> float:
        return float(self.clock())

    def lease(self) -> dict[str, Any]:
        """The owner and lease fields of a claim made now."""
        return {"owner": self.owner, "lease_expires_at": self.now() + self.lease_s}

    def lease_live(self, record: EffectRecord) -> bool:
        """Whether the record's lease has not run out (no lease: it has)."""
        expires = record.lease_expires_at
        return expires is not None and expires > self.now()

    def held_elsewhere(self, record: EffectRecord) -> bool:
        """A pending claim of another owner whose lease is live: its call may be in flight."""
        return (
            record.status is EffectStatus.PENDING
            and record.owner is not None
            and record.owner != self.owner
            and self.lease_live(record)
        )

    def holder(self, record: EffectRecord) -> str:
        """Who holds the claim and until when, for messages."""
        left = 0.0 if record.lease_expires_at is None else record.lease_expires_at - self.now()
        return (
            f"held by {record.owner!r} under fencing token {record.fence}, "
            f"lease {max(0.0, left):.1f} s left"
        )

    def in_flight(self, record: EffectRecord, what: str = "") -> EffectInFlightError:
        """The error for a live claim of another owner."""
        return EffectInFlightError(
            f"effect {record.key!r} ({record.action}) is in flight elsewhere: "
            f"{self.holder(record)}{what}"
        )
