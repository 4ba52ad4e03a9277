"""The failures the adversarial suite found that are not fixed: each with the file, the
input, the behaviour and the reason. Fixed since the suite found them: deep-JSON
RecursionError in models/_json.py, lone surrogates in SuccessMemory and the test models'
token count, /proc/<pid>/environ readable from the harness sandbox, and the framework's
own 404 body shape."""

from __future__ import annotations

__all__ = ["KNOWN_LIMITS", "known_ids", "known_limit"]

KNOWN_LIMITS: list[dict[str, str]] = [
    {
        "id": "secrets-in-task-state",
        "match": "holds the key from the prompt",
        "file": "src/closedloop/agent/_state.py (StateHandle.save), agent/_protocols.py "
        "(SuccessMemory)",
        "input": "a task prompt, tool arguments or answer holding an API key",
        "behaviour": "the SQLite store keeps them verbatim (task state and the success "
        "memory); traces, report.json and logs are redacted, a tool's configured headers "
        "never reach the store",
        "reason": "the task state is what resume works from; redacting it needs a decision "
        "(redact the success memory; keep secrets out of prompts)",
    },
]


def known_ids(examples: list[str]) -> list[str]:
    """The ids of the known limits some of ``examples`` show."""
    return sorted({k["id"] for k in KNOWN_LIMITS for e in examples if k["match"] in e})


def known_limit(detail: str) -> str | None:
    """The id of the known limit a failure's detail shows, if any."""
    for limit in KNOWN_LIMITS:
        if limit["match"] in detail:
            return limit["id"]
    return None
