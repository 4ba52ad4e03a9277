"""The public surface of closedloop.decision is pinned."""

from __future__ import annotations

import closedloop.decision as decision

EXPECTED = {
    "OUT_OF_TOLERANCE", "RULE_ACTIONS", "Decision", "DecisionContext", "DecisionLog",
    "HybridController", "ModelPolicy", "Proposal", "Rule", "RuleFn", "RuleGate", "RuleRegistry", "SourceState", "StateVector",
    "Threshold", "Trigger", "cause_key", "default_causes", "default_rules", "escalate",
}  # fmt: skip


def isort_order(name: str) -> tuple[int, str]:
    """ruff's __all__ order: CONSTANTS, then Classes, then functions."""
    return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)


def test_exported_members_are_pinned_and_sorted() -> None:
    assert set(decision.__all__) == EXPECTED
    assert decision.__all__ == sorted(decision.__all__, key=isort_order)
    for name in decision.__all__:
        obj = getattr(decision, name)
        if isinstance(obj, type):
            assert obj.__module__ == "closedloop.decision", name
