"""Confidence sensors read before a call runs: sample agreement and decision-token logprobs.

Two published signals predict whether a model's structured answer is right. Agreement of
independent samples compared as parsed, normalised calls (self-consistency, Wang et al.
2023), with its margin: the top call's vote share minus the runner-up's. And the
log-probabilities of the tokens that carry the decision (tool name, argument values), not
of the punctuation and keys a grammar forces; low token-level quantiles predict errors
better than the sequence probability (Gupta et al., ICLR 2024). Everything here is pure.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "Confidence",
    "TokenLogprob",
    "agreement_of",
    "decision_mask",
    "logprob_confidence",
    "mark_decisions",
    "quantile",
    "value_spans",
]

_FROZEN = ConfigDict(frozen=True, extra="forbid")
LOW_QUANTILE = 0.1
"""The low quantile reported for decision-token logprobs."""


class TokenLogprob(BaseModel):
    """One generated token, its log-probability under the model, and whether it carries
    the decision (part of a JSON value rather than forced punctuation or a key)."""

    model_config = _FROZEN
    token: str
    logprob: float = Field(le=0.0)
    decision: bool = True


class Confidence(BaseModel):
    """What the sensors read on one proposal; a field is None where its sensor had no input.

    ``agreement`` is the share of ``samples`` behind the most common normalised call,
    ``margin`` that share minus the runner-up's. ``logprob_mean``, ``logprob_min`` and
    ``logprob_low`` (the 10th percentile) summarise the decision tokens' logprobs.
    """

    model_config = _FROZEN
    samples: int = Field(default=1, ge=1)
    agreement: float | None = Field(default=None, ge=0.0, le=1.0)
    margin: float | None = Field(default=None, ge=0.0, le=1.0)
    decision_tokens: int = Field(default=0, ge=0)
    logprob_mean: float | None = Field(default=None, le=0.0)
    logprob_min: float | None = Field(default=None, le=0.0)
    logprob_low: float | None = Field(default=None, le=0.0)


def quantile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile of ``values`` by linear interpolation between order statistics."""
    if not values:
        raise ValueError("quantile of no values")
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def agreement_of(keys: Sequence[str | None]) -> tuple[float, float]:
    """Agreement and margin of samples given as normalised call keys (None: no valid call,
    which counts against every call)."""
    if not keys:
        raise ValueError("agreement of no samples")
    counts = Counter(k for k in keys if k is not None).most_common(2)
    n = len(keys)
    top = counts[0][1] / n if counts else 0.0
    second = counts[1][1] / n if len(counts) > 1 else 0.0
    return top, top - second


def value_spans(text: str) -> list[tuple[int, int]]:
    """Character spans of the JSON values in ``text`` (string contents, numbers, literals),
    keys excluded: what a model chose, not what a grammar forced. A tolerant scan, so a
    truncated reply still yields the spans it holds."""
    spans: list[tuple[int, int]] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            rest = text[min(j + 1, n) :].lstrip()
            if not rest.startswith(":") and j > i + 1:
                spans.append((i + 1, min(j, n)))
            i = j + 1
        elif c.isalnum() or c in "-+.":
            j = i
            while j < n and (text[j].isalnum() or text[j] in "-+.eE"):
                j += 1
            spans.append((i, j))
            i = j
        else:
            i += 1
    return spans


def decision_mask(pieces: Sequence[str], text: str | None = None) -> list[bool]:
    """Which of the generated ``pieces`` (token texts, in order) overlap a value span of
    their concatenation (or of ``text`` when the pieces spell it)."""
    whole = "".join(pieces) if text is None else text
    spans = value_spans(whole)
    mask: list[bool] = []
    start = 0
    for piece in pieces:
        end = start + len(piece)
        mask.append(any(a < end and start < b for a, b in spans))
        start = end
    return mask


def logprob_confidence(tokens: Sequence[TokenLogprob], samples: int = 1) -> Confidence:
    """The logprob summaries of the decision tokens among ``tokens``."""
    chosen = [t.logprob for t in tokens if t.decision]
    if not chosen:
        return Confidence(samples=samples)
    return Confidence(
        samples=samples,
        decision_tokens=len(chosen),
        logprob_mean=min(0.0, sum(chosen) / len(chosen)),
        logprob_min=min(chosen),
        logprob_low=quantile(chosen, LOW_QUANTILE),
    )


def mark_decisions(tokens: Sequence[tuple[str, float]]) -> tuple[TokenLogprob, ...]:
    """Token texts with logprobs, marked as decision tokens or not."""
    mask = decision_mask([t for t, _ in tokens])
    return tuple(
        TokenLogprob(token=t, logprob=min(0.0, lp), decision=d)
        for (t, lp), d in zip(tokens, mask, strict=True)
    )
