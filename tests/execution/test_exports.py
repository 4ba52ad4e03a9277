"""The public surface of closedloop.execution is a decision, not an accident."""

from __future__ import annotations

import closedloop.execution as execution
import closedloop.policy as policy

EXPECTED = {
    "DEFAULT_VOLATILE_FIELDS", "PROGRAMMING_ERRORS", "ActionOutcome", "AdmissionGate",
    "AtomicAction", "CheckFn", "Permit", "Throttled",
    "Compensation", "CompensationResult", "Condition", "Confirmation", "EffectClass",
    "EffectLedger", "EffectRecord", "EffectStatus", "EnvResolver", "ExecutionEvent",
    "Executor", "OutcomeStatus", "Reconciler", "Reconciliation", "RecordStore", "RetryIf",
    "RetryIfAll", "RetryIfAny", "RetryIfException", "RetryIfPredicate", "RetryNever",
    "RetryPolicy", "RetryState", "Secret", "SecretResolver", "Stop", "StopAfterAttempt",
    "StopAfterDelay", "StopAll", "StopAny", "Wait",
    "WaitExponential", "WaitFixed", "WaitFullJitter", "WaitNone", "WaitRandom", "WaitSum",
    "canonical_json", "effect_key", "execute", "execute_sync", "normalise",
}  # fmt: skip


def isort_order(name: str) -> tuple[int, str]:
    """ruff's __all__ order: CONSTANTS, then Classes, then functions."""
    return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)


def test_exported_members_are_pinned_and_sorted() -> None:
    assert set(execution.__all__) == EXPECTED
    assert execution.__all__ == sorted(execution.__all__, key=isort_order)
    for name in execution.__all__:
        obj = getattr(execution, name)
        if isinstance(obj, type):
            # The retry names are the shared policy algebra's, kept here as aliases.
            assert obj.__module__ in ("closedloop.execution", "closedloop.policy"), name
            if obj.__module__ == "closedloop.policy":
                assert obj in vars(policy).values(), name


def test_any_state_store_satisfies_the_ledgers_record_store() -> None:
    from closedloop.feedback import MemoryStore

    ledger = execution.EffectLedger(MemoryStore())
    assert ledger.namespace == "ledger"
