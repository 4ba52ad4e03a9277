"""What one execution told the loop: an executor's outcome as an :class:`Observation`.

A failure is named by what happened (not run, failed a check, timed out, may need
reconciling), and any secret in the text becomes its reference before the model reads it.
"""

from __future__ import annotations

from ..execution import ActionOutcome, OutcomeStatus
from ..execution._secret import RunSecrets
from ..perception import Observation, ObservationStatus
from ._tools import to_observation

__all__ = ["adopt_secrets", "outcome_observation"]


def outcome_observation(outcome: ActionOutcome, source: str, now: float) -> Observation:
    """What one execution told the loop, as an observation the model reads next step."""
    if outcome.ok:
        obs = to_observation(outcome.result, source=source, timestamp=now)
        if outcome.status is OutcomeStatus.REPLAYED:
            obs = obs.model_copy(
                update={
                    "meaning": f"{obs.meaning} (the recorded result; the effect was not repeated)"
                }
            )
        return obs
    error = f"{type(outcome.error).__name__}: {outcome.error}" if outcome.error else outcome.status
    meanings = {
        OutcomeStatus.PRECONDITION_FAILED: f"{source} was not run: {outcome.error}",
        OutcomeStatus.CONFIRMATION_REQUIRED: f"{source} was not run: it needs a human confirmation",
        OutcomeStatus.POSTCONDITION_FAILED: (
            f"{source} ran but its result failed a check: {outcome.error}"
        ),
        OutcomeStatus.RECONCILIATION_REQUIRED: (
            f"{source} may or may not have taken effect; it must be reconciled before anything "
            "else relies on it"
        ),
        OutcomeStatus.TIMED_OUT: f"{source} did not answer in time: {outcome.error}",
    }
    meaning = meanings.get(outcome.status, f"{source} failed: {error}")
    if outcome.status is OutcomeStatus.TIMED_OUT:
        return Observation(
            value=None,
            confidence=0.0,
            timestamp=now,
            source=source,
            status=ObservationStatus.TIMEOUT,
            meaning=meaning,
            error=str(error),
        )
    return Observation.failed(str(error), source=source, timestamp=now, meaning=meaning)


def adopt_secrets(secrets: RunSecrets, observation: Observation) -> Observation:
    """The observation with any secret in its text as a reference (the model reads it)."""
    update = {
        name: adopted
        for name in ("value", "meaning", "error")
        if (adopted := secrets.adopt(getattr(observation, name))) is not getattr(observation, name)
    }
    return observation.model_copy(update=update) if update else observation
