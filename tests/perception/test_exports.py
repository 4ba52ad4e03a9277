"""The public surface of closedloop.perception is a decision: pin it."""

from __future__ import annotations

import closedloop.control
import closedloop.perception as perception

EXPECTED = {
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
}


def test_all_is_sorted_and_pinned() -> None:
    # ruff's RUF022 order: CONSTANTS, then Classes, then functions, each alphabetical.
    def group(name: str) -> tuple[int, str]:
        return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)

    assert perception.__all__ == sorted(perception.__all__, key=group)
    assert set(perception.__all__) == EXPECTED
    for name in perception.__all__:
        assert getattr(perception, name) is not None


def test_latency_tracker_is_the_control_one() -> None:
    assert perception.LatencyTracker is closedloop.control.LatencyTracker
    assert perception.LatencyTracker.__module__.startswith("closedloop.control")


def test_public_classes_and_functions_show_their_public_home() -> None:
    for name in ("Observation", "HttpTool", "sanitize_json", "error_similarity"):
        assert getattr(perception, name).__module__ == "closedloop.perception"
    # The 429 event is the feedback layer's, re-exported: it keeps its home.
    assert perception.RateLimited.__module__ == "closedloop.feedback"
