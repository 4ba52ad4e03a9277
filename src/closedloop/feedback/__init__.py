"""The feedback layer: session state with compare-and-set and TTLs, events, and healing.

``feedback`` is the only place where state is stored (see docs/architecture.md): every other
part receives immutable :class:`Snapshot`s and hands back updates. Faults travel as typed
events on an :class:`EventBus` whose registered strategies answer with
:class:`HealingAction`s the loop applies. Tasks frozen for a person wait in the persisted
:class:`HandoverQueue` until a reviewer approves, edits or rejects them.
"""

from __future__ import annotations

from .._faults import (
    EmptyResult,
    FaultEvent,
    HandoverRequested,
    RateLimited,
    SchemaDrift,
    ServerError,
    TimeoutEvent,
)
from .._public import present_under
from ._bus import Delivery, EventBus, HandlerOutcome
from ._circuit import CircuitBreaker, CircuitState
from ._contract import Record, Snapshot, StateStore, StoreStats
from ._handover import (
    HANDOVER_NAMESPACE,
    HandoverDecision,
    HandoverItem,
    HandoverQueue,
    HandoverStatus,
)
from ._healing import (
    EscalateToHuman,
    HealingAction,
    HealingKind,
    HealingStrategies,
    OpenCircuit,
    SwitchToCache,
    WidenTimeout,
    event_payload,
    install_healing,
)
from ._json import JSONValue
from ._memory import MemoryStore
from ._provider_state import (
    Admission,
    MemoryProviderState,
    ProviderSnapshot,
    RedisProviderState,
)
from ._proxy import StoreProxy
from ._redis import RedisStore
from ._sqlite import SQLiteStore
from ._store import DEFAULT_MAX_DOCUMENT_BYTES
from ._sync import SyncStore
from ._thresholds import THRESHOLD_NAMESPACE, ThresholdStates

__all__ = [
    "DEFAULT_MAX_DOCUMENT_BYTES",
    "HANDOVER_NAMESPACE",
    "THRESHOLD_NAMESPACE",
    "Admission",
    "CircuitBreaker",
    "CircuitState",
    "Delivery",
    "EmptyResult",
    "EscalateToHuman",
    "EventBus",
    "FaultEvent",
    "HandlerOutcome",
    "HandoverDecision",
    "HandoverItem",
    "HandoverQueue",
    "HandoverRequested",
    "HandoverStatus",
    "HealingAction",
    "HealingKind",
    "HealingStrategies",
    "JSONValue",
    "MemoryProviderState",
    "MemoryStore",
    "OpenCircuit",
    "ProviderSnapshot",
    "RateLimited",
    "Record",
    "RedisProviderState",
    "RedisStore",
    "SQLiteStore",
    "SchemaDrift",
    "ServerError",
    "Snapshot",
    "StateStore",
    "StoreProxy",
    "StoreStats",
    "SwitchToCache",
    "SyncStore",
    "ThresholdStates",
    "TimeoutEvent",
    "WidenTimeout",
    "event_payload",
    "install_healing",
]

# Public names show as closedloop.feedback.X in reprs and docs.
present_under(globals(), __all__, __name__)
