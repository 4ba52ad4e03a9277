"""The failures the adversarial suite found that are not fixed: each with the file, the
input, the behaviour and the reason. Fixed since the suite found them: deep-JSON
RecursionError in models/_json.py, lone surrogates in SuccessMemory and the test models'
token count, /proc/<pid>/environ readable from the harness sandbox, the framework's
own 404 body shape, and secrets from the task's text and the tools' arguments kept in
clear in the SQLite store (now scrubbed at the store's write boundary)."""

from __future__ import annotations

__all__ = ["KNOWN_LIMITS", "known_ids", "known_limit"]

KNOWN_LIMITS: list[dict[str, str]] = []
"""Each entry: ``id``, ``match`` (text of the failures it explains), ``file``, ``input``,
``behaviour`` and ``reason``."""


def known_ids(examples: list[str]) -> list[str]:
    """The ids of the known limits some of ``examples`` show."""
    return sorted({k["id"] for k in KNOWN_LIMITS for e in examples if k["match"] in e})


def known_limit(detail: str) -> str | None:
    """The id of the known limit a failure's detail shows, if any."""
    for limit in KNOWN_LIMITS:
        if limit["match"] in detail:
            return limit["id"]
    return None
