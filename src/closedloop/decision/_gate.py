"""The confidence gate of a hybrid controller inside an agent's loop.

Rules first, the model past a gate: after a tool answers with a known cause of failure
(a 429, a 5xx, a timeout, a stale cache), a registered rule proposes what to do. When the
rule's confidence clears the gate, the loop acts on it without asking the model (the same
call again, after the rule's wait); otherwise the model decides, with the rule's advice as
a note. The gate is not fixed: it rises with the recent error of the failing tool, so a
fault that passes is handled by the rule alone, and one that persists goes back to the
model, which can change the call. This is the supervisory switching of hybrid control
(Branicky 1998) with a dynamic threshold; the cost it saves is model calls.
"""

from __future__ import annotations

from dataclasses import dataclass

from .._exceptions import ConfigurationError
from .._validation import require_int_at_least, require_non_negative, require_unit_interval

__all__ = ["RULE_ACTIONS", "RuleGate"]

RULE_ACTIONS = frozenset({"back_off", "retry_later", "widen_timeout", "refresh"})
"""The rule actions the loop can carry out alone: each makes the same call again (after a
wait, or with a wider timeout). Others (widen the query, switch source, ask) need a new
call, so they stay advice for the model."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RuleGate:
    """Rules act alone when ``confidence >= base + slope * recent error``.

    ``recent error`` is the mean measured error of the failing tool's ``window`` steps
    before the failing one (0 when there are none), so the gate is low after a lone fault
    and climbs while the fault persists.
    ``actions`` are the rule actions the loop may carry out (a subset of
    :data:`RULE_ACTIONS`); ``max_wait_s`` caps a rule's wait (a Retry-After included).
    """

    base: float = 0.3
    slope: float = 0.6
    window: int = 3
    actions: frozenset[str] = RULE_ACTIONS
    max_wait_s: float = 30.0

    def __post_init__(self) -> None:
        require_unit_interval("base", self.base)
        require_non_negative("slope", self.slope)
        require_int_at_least("window", self.window, 1)
        require_non_negative("max_wait_s", self.max_wait_s)
        actions = frozenset(self.actions)
        unknown = sorted(actions - RULE_ACTIONS)
        if unknown:
            raise ConfigurationError(
                "actions", unknown, f"the loop can carry out only {sorted(RULE_ACTIONS)}"
            )
        object.__setattr__(self, "actions", actions)

    def threshold(self, recent_error: float) -> float:
        """The confidence a rule needs at this recent error, in [0, 1]."""
        return min(1.0, self.base + self.slope * max(0.0, recent_error))
