"""Escalation in a model cascade, decided before anything executes.

A cascade asks the cheap model first and the next one only when the cheap model's own
signal says it is unsure: the agreement of its samples (the Mixture-of-Thoughts cascade,
Yue et al., ICLR 2024) or a calibrated confidence of a single sample. The decision is
taken on the proposal, before its call runs, so a call the cheap model was unsure of
never takes effect.
"""

from __future__ import annotations

from .._exceptions import ConfigurationError
from .._validation import require_unit_interval

__all__ = ["escalate"]


def escalate(confidence: float | None, threshold: float) -> bool:
    """Whether a proposal goes to the next rung: its confidence is below ``threshold``.

    ``confidence`` is in [0, 1]; None means the rung gave no signal (one sample and no
    log-probabilities), which never escalates, because escalating on no evidence would
    make every step pay for both models.
    """
    threshold = require_unit_interval("threshold", threshold)
    if confidence is None:
        return False
    if isinstance(confidence, bool):
        raise ConfigurationError("confidence", confidence, "must be a number in [0, 1]")
    return require_unit_interval("confidence", confidence) < threshold
