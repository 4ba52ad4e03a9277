"""Error metrics: each maps an observation to e ∈ [0, 1], where 0 means no error.

These are the measured errors the controllers act on: e1 business
success (key fields present), e2 normalised edit distance, keyword coverage, embedding
similarity, and e3 user feedback.
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._exceptions import ConfigurationError
from .._validation import require_non_negative, require_unit_interval
from ._embed import Embedder, NGramEmbedder
from ._paths import check_paths, is_blank, resolve

__all__ = [
    "error_business",
    "error_edit_distance",
    "error_feedback",
    "error_keyword_coverage",
    "error_similarity",
    "levenshtein",
]


def _clip(value: float) -> float:
    return min(1.0, max(0.0, value))


def _require_str(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ConfigurationError(name, value, "must be a str")
    return value


def error_business(data: Any, key_fields: Sequence[str], *, blank_is_missing: bool = True) -> float:
    """e1: the fraction of ``key_fields`` that are missing from ``data``.

    Fields are dotted paths (``"forecast.0.temp"``). A field counts as missing when it
    is absent or None, and by default also when it is blank (an empty string or an
    empty container): a required field must be present *and* non-empty.
    No key fields means nothing is required: 0.0.
    """
    fields = check_paths("key_fields", key_fields)
    if not fields:
        return 0.0
    missing = 0
    for path in dict.fromkeys(fields):
        found, value = resolve(data, path)
        if not found or value is None or (blank_is_missing and is_blank(value)):
            missing += 1
    return missing / len(dict.fromkeys(fields))


def levenshtein(a: str, b: str) -> int:
    """Edit distance (insertions, deletions, substitutions) between two strings, by code point."""
    _require_str("a", a)
    _require_str("b", b)
    # Common prefix and suffix cost nothing and are the usual case for near-misses.
    start = 0
    while start < min(len(a), len(b)) and a[start] == b[start]:
        start += 1
    end_a, end_b = len(a), len(b)
    while end_a > start and end_b > start and a[end_a - 1] == b[end_b - 1]:
        end_a -= 1
        end_b -= 1
    a, b = a[start:end_a], b[start:end_b]
    if len(a) < len(b):
        a, b = b, a
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, start=1):
        current = [i]
        for j, cb in enumerate(b, start=1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1]


def error_edit_distance(expected: str, actual: str) -> float:
    """e2: Levenshtein distance / the longer length; 0 when both are empty.

    Example: the user asked for 北就, the API answered 北京: 1 edit / 2 = 0.5.
    The comparison is by Unicode code point and case-sensitive; normalise first if needed.
    """
    _require_str("expected", expected)
    _require_str("actual", actual)
    longest = max(len(expected), len(actual))
    if longest == 0:
        return 0.0
    return levenshtein(expected, actual) / longest


def _fold(text: str) -> str:
    return unicodedata.normalize("NFKC", text).casefold()


def error_keyword_coverage(text: str, keywords: Sequence[str]) -> float:
    """The fraction of ``keywords`` that do not occur in ``text``.

    Matching is by substring after NFKC normalisation and case folding (substrings
    need no tokenizer, so Chinese keywords work). Duplicate and blank keywords are
    ignored; no keywords means nothing is required: 0.0.
    """
    _require_str("text", text)
    if isinstance(keywords, str):
        raise ConfigurationError("keywords", keywords, "must be a sequence of str, not a str")
    wanted = {_fold(_require_str("keywords[]", k)).strip() for k in keywords}
    wanted.discard("")
    if not wanted:
        return 0.0
    haystack = _fold(text)
    return sum(1 for k in wanted if k not in haystack) / len(wanted)


def error_similarity(a: str, b: str, embedder: Embedder | None = None) -> float:
    """1 − cosine similarity of the two texts' embeddings, clipped to [0, 1].

    The default embedder is ``NGramEmbedder()`` fitted on the pair. Identical texts
    are 0.0 whatever the embedder's rounding; a text without content against one with
    content is 1.0; negative cosines (possible with neural embedders) count as 1.0.
    """
    _require_str("a", a)
    _require_str("b", b)
    if a == b:
        return 0.0
    vectors = np.asarray((embedder or NGramEmbedder()).embed([a, b]), dtype=np.float64)
    if vectors.ndim != 2 or vectors.shape[0] != 2:
        raise ConfigurationError("embedder", embedder, f"returned shape {vectors.shape}")
    if not np.all(np.isfinite(vectors)):
        raise ConfigurationError("embedder", embedder, "returned non-finite values")
    norm_a, norm_b = (float(np.linalg.norm(v)) for v in vectors)
    if norm_a == 0.0 and norm_b == 0.0:
        return 0.0  # neither text has content (e.g. both only whitespace)
    if norm_a == 0.0 or norm_b == 0.0:
        return 1.0
    cosine = float(np.dot(vectors[0], vectors[1])) / (norm_a * norm_b)
    return _clip(1.0 - cosine)


def error_feedback(positive: float, total: float, *, if_none: float = 0.0) -> float:
    """e3: the share of feedback that was not positive, ``1 − positive / total``.

    ``if_none`` is returned when there is no feedback yet (``total == 0``). The default
    0.0 keeps silence from moving a controller; pass 0.5 to read silence as uncertainty.
    Counts may be weighted (floats); ``positive`` may not exceed ``total``.
    """
    positive = require_non_negative("positive", positive)
    total = require_non_negative("total", total)
    if_none = require_unit_interval("if_none", if_none)
    if positive > total:
        raise ConfigurationError("positive", positive, f"exceeds total={total!r}")
    if total == 0.0:
        return if_none
    ratio = positive / total
    return _clip(1.0 - ratio) if math.isfinite(ratio) else if_none
