"""The one state snapshot every policy reads, and the one decision a policy makes."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from ._exceptions import ConfigurationError
from ._public import present_under

__all__ = ["PROGRAMMING_ERRORS", "PolicyDecision", "PolicyState", "Verdict"]

# Errors that mean the code is wrong, not the world: retrying them only repeats the bug.
PROGRAMMING_ERRORS: tuple[type[BaseException], ...] = (
    TypeError,
    AttributeError,
    NameError,
    AssertionError,
    NotImplementedError,
    ConfigurationError,
)
"""Exceptions that mean the code is wrong, not the world: never retried."""


def _default_rng() -> random.Random:
    return random.Random(0)


# For the states of a policy that draws nothing (no jitter): one generator shared by all of
# them, since seeding a fresh one per state costs more than most checks made with it.
NO_DRAWS = random.Random(0)


@dataclass(frozen=True, slots=True, kw_only=True)
class PolicyState:
    """What every strategy sees: one snapshot after an attempt (or between two steps).

    ``attempt`` counts the attempts made so far (an agent's steps, a refiner's rounds);
    ``elapsed_s`` is the time since the first attempt began, from the injected clock;
    ``outcome`` is the last attempt's result and ``error`` what it raised (``None`` if it
    returned); ``slept_s`` is the backoff already spent; ``facts`` holds what a domain adds
    (a run's token count, its repeats, a refiner's scores); ``rng`` is the seeded random
    source that jitter draws from.
    """

    attempt: int = 0
    elapsed_s: float = 0.0
    outcome: Any = None
    error: BaseException | None = None
    slept_s: float = 0.0
    facts: Mapping[str, Any] = field(default_factory=dict)
    rng: random.Random = field(default_factory=_default_rng, compare=False, repr=False)

    def fact(self, name: str, default: Any = None) -> Any:
        """One domain fact, or ``default`` when the state does not carry it."""
        return self.facts.get(name, default)


class Verdict(StrEnum):
    """What a policy says comes next."""

    ATTEMPT = "attempt"
    """Go on: make the next attempt (or take the next step) now."""
    WAIT = "wait"
    """Retry after ``delay_s`` seconds (zero included: the driver still yields)."""
    STOP = "stop"
    """No further attempt."""


@dataclass(frozen=True, slots=True)
class PolicyDecision:
    """The one decision a policy makes over a state, and why."""

    verdict: Verdict
    delay_s: float = 0.0
    reason: Any = None


# Public names show as closedloop.policy.X in reprs and docs (httpx does the same).
present_under(globals(), __all__, "closedloop.policy")
