"""Verdicts of the faults report: a summary bounded by the rows it summarises."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["bounded_verdict"]

_DEFINITE = ("confirmed", "refuted", "qualified")


def bounded_verdict(summary: str, rows: Sequence[str]) -> str:
    """A claim's summary verdict, never saying more than its like-for-like rows.

    A definite summary (confirmed, refuted, qualified) stands only when at least one row
    reaches the same verdict on its interval; point estimates alone are inconclusive.
    """
    word = summary.split(" ", 1)[0]
    if word not in _DEFINITE or not rows or any(r.split(" ", 1)[0] == word for r in rows):
        return summary
    return f"inconclusive (point estimates say {summary}; no like-for-like row does)"
