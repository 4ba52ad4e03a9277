"""Perception: the world's raw answers become scored observations, and those become errors.

``Observation`` carries a value with its confidence, status and meaning; ``HttpTool``
turns an HTTP endpoint into a source of them; ``sanitize_json`` recovers JSON from
drifted model output; the ``error_*`` functions measure e(t) ∈ [0, 1] for the
controllers. Perception measures and scores; it does not decide (see docs/architecture.md).
"""

from __future__ import annotations

from inspect import isfunction

from .._faults import RateLimited
from ..control import LatencyTracker
from ._calibration import IsotonicCalibration
from ._compact import Compacted, compact, json_size
from ._embed import Embedder, NGramEmbedder, SentenceTransformerEmbedder
from ._events import EventListener, PerceptionEvent
from ._http_tool import HttpTool
from ._metrics import (
    error_business,
    error_edit_distance,
    error_feedback,
    error_keyword_coverage,
    error_similarity,
    levenshtein,
)
from ._observation import EMPTY_MEANING, Observation, ObservationStatus
from ._retry_after import parse_retry_after
from ._sanitize import SanitizeResult, sanitize_json
from ._scoring import ConfidencePolicy

__all__ = [
    "EMPTY_MEANING",
    "Compacted",
    "ConfidencePolicy",
    "Embedder",
    "EventListener",
    "HttpTool",
    "IsotonicCalibration",
    "LatencyTracker",
    "NGramEmbedder",
    "Observation",
    "ObservationStatus",
    "PerceptionEvent",
    "RateLimited",
    "SanitizeResult",
    "SentenceTransformerEmbedder",
    "compact",
    "error_business",
    "error_edit_distance",
    "error_feedback",
    "error_keyword_coverage",
    "error_similarity",
    "json_size",
    "levenshtein",
    "parse_retry_after",
    "sanitize_json",
]

# Public names show as closedloop.perception.X (the re-exported tracker and event keep
# their homes).
for _name in __all__:
    _obj = globals()[_name]
    if (isinstance(_obj, type) or isfunction(_obj)) and _obj.__module__.startswith(__name__):
        _obj.__module__ = __name__
