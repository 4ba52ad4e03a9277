"""The public surface of closedloop.feedback is a decision: pin it."""

from __future__ import annotations

import dataclasses
from types import FunctionType

import closedloop.feedback as feedback

EXPECTED = {
    "CircuitBreaker",
    "CircuitState",
    "DEFAULT_MAX_DOCUMENT_BYTES",
    "Delivery",
    "EmptyResult",
    "EscalateToHuman",
    "EventBus",
    "FaultEvent",
    "HANDOVER_NAMESPACE",
    "THRESHOLD_NAMESPACE",
    "HandlerOutcome",
    "HandoverDecision",
    "HandoverItem",
    "HandoverQueue",
    "HandoverStatus",
    "HandoverRequested",
    "HealingAction",
    "HealingKind",
    "HealingStrategies",
    "JSONValue",
    "MemoryProviderState",
    "MemoryStore",
    "ProviderSnapshot",
    "RedisProviderState",
    "Admission",
    "OpenCircuit",
    "RateLimited",
    "Record",
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
}


def test_exported_names() -> None:
    assert set(feedback.__all__) == EXPECTED
    assert len(feedback.__all__) == len(EXPECTED)
    for name in feedback.__all__:
        assert hasattr(feedback, name), name


def test_public_classes_and_functions_show_the_public_module() -> None:
    for name in feedback.__all__:
        obj = getattr(feedback, name)
        if isinstance(obj, type | FunctionType):
            assert obj.__module__ == "closedloop.feedback", name


def test_value_types_are_frozen_dataclasses() -> None:
    for cls in (
        feedback.Snapshot,
        feedback.Record,
        feedback.StoreStats,
        feedback.HealingAction,
        feedback.Delivery,
        feedback.HandlerOutcome,
        feedback.FaultEvent,
        feedback.RateLimited,
    ):
        assert dataclasses.is_dataclass(cls)
        assert cls.__dataclass_params__.frozen, cls  # type: ignore[union-attr]
