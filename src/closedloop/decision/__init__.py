"""Decision: read observations and control settings, choose the next move.

:class:`HybridController` keeps the model behind a gate: inside the tolerance it maintains,
for a known cause it applies a registered rule, and only when the best rule is unsure does
it ask the model. Every :class:`Decision` is logged with its reason.
"""

from __future__ import annotations

from .._public import present_under
from ._cascade import escalate
from ._context import DecisionContext, Proposal, SourceState, StateVector, Trigger
from ._controller import Decision, DecisionLog, HybridController, ModelPolicy, Threshold
from ._gate import RULE_ACTIONS, RuleGate
from ._rules import (
    OUT_OF_TOLERANCE,
    Rule,
    RuleFn,
    RuleRegistry,
    cause_key,
    default_causes,
    default_rules,
)

__all__ = [
    "OUT_OF_TOLERANCE",
    "RULE_ACTIONS",
    "Decision",
    "DecisionContext",
    "DecisionLog",
    "HybridController",
    "ModelPolicy",
    "Proposal",
    "Rule",
    "RuleFn",
    "RuleGate",
    "RuleRegistry",
    "SourceState",
    "StateVector",
    "Threshold",
    "Trigger",
    "cause_key",
    "default_causes",
    "default_rules",
    "escalate",
]

# Public names show as closedloop.decision.X in reprs and docs.
present_under(globals(), __all__, __name__)
