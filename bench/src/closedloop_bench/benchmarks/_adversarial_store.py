"""The adversarial suite's store audit: is the SQLite file still consistent after a case?

Read straight from the file (a second connection, as an operator's tool would), so a
store that lied to its own caller cannot hide it: every session's document parses and,
where it is an agent's task state, validates; versions never go back between audits;
and the effect ledger holds no effect committed twice (two records of the same task,
action and arguments, both committed).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from closedloop.agent import TaskState
from closedloop.execution import canonical_json

__all__ = ["StoreAudit", "audit_sqlite"]

_ONCE = frozenset({"once", "irreversible"})
# A committed effect may later be compensated; it must never go back to pending or vanish.
_AFTER_COMMIT = frozenset({"committed", "compensated", "compensation_failed"})


@dataclass(slots=True)
class StoreAudit:
    """What one audit found; ``versions`` carries over to the next audit of the same file."""

    sessions: int = 0
    records: int = 0
    problems: list[str] = field(default_factory=list)
    duplicated_effects: int = 0
    committed: dict[str, int] = field(default_factory=dict)
    versions: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems and self.duplicated_effects == 0


def _effect_identity(value: Mapping[str, Any]) -> str:
    args = value.get("args", {})
    return canonical_json([value.get("task_id"), value.get("action"), args])


def audit_sqlite(
    path: str | Path,
    *,
    previous: Mapping[str, int] | None = None,
    committed_before: Mapping[str, int] | None = None,
) -> StoreAudit:
    """Audit the SQLite store file at ``path``.

    ``previous`` maps session ids to the versions an earlier audit saw: a lower version
    now (or a vanished session that was not expired) is a problem. ``committed_before``
    maps ledger keys to the versions of committed effects seen earlier: a committed
    effect that is gone or no longer committed is committed state lost.
    """
    audit = StoreAudit()
    uri = f"file:{Path(path)}?mode=ro"
    try:
        conn = sqlite3.connect(uri, uri=True, timeout=30.0)
    except sqlite3.Error as exc:
        audit.problems.append(f"the store file cannot be opened: {exc}")
        return audit
    try:
        check = conn.execute("PRAGMA quick_check").fetchone()
        if check is None or check[0] != "ok":
            audit.problems.append(f"sqlite quick_check: {check!r}")
        sessions = conn.execute(
            "SELECT session_id, version, data, expires_at FROM sessions"
        ).fetchall()
        records = conn.execute("SELECT namespace, key, version, value FROM records").fetchall()
    except sqlite3.Error as exc:
        audit.problems.append(f"the store file cannot be read: {exc}")
        return audit
    finally:
        conn.close()
    audit.sessions = len(sessions)
    audit.records = len(records)
    for session_id, version, text, _expires in sessions:
        audit.versions[session_id] = int(version)
        if int(version) < 1:
            audit.problems.append(f"session {session_id!r} has version {version}")
        before = (previous or {}).get(session_id)
        if before is not None and int(version) < before:
            audit.problems.append(f"session {session_id!r} went back from v{before} to v{version}")
        try:
            data = json.loads(text)
        except ValueError as exc:
            audit.problems.append(f"session {session_id!r} does not parse: {exc}")
            continue
        if not isinstance(data, dict):
            audit.problems.append(f"session {session_id!r} is not an object")
            continue
        if "task_id" in data and "run_id" in data and "phase" in data:
            try:
                TaskState.model_validate(data)
            except ValidationError as exc:
                audit.problems.append(f"session {session_id!r} is not a valid TaskState: {exc}")
    gone = set(previous or {}) - set(audit.versions)
    for session_id in sorted(gone):
        audit.problems.append(f"session {session_id!r} vanished")
    seen: dict[str, str] = {}
    kept: set[str] = set()
    for namespace, key, version, text in records:
        try:
            value = json.loads(text)
        except ValueError as exc:
            audit.problems.append(f"record {namespace}/{key} does not parse: {exc}")
            continue
        if namespace != "ledger" or not isinstance(value, dict):
            continue
        status = value.get("status")
        if status in _AFTER_COMMIT:
            kept.add(key)
        if status != "committed":
            continue
        audit.committed[key] = int(version)
        if value.get("effect") not in _ONCE:
            continue
        identity = _effect_identity(value)
        if identity in seen:
            audit.duplicated_effects += 1
            audit.problems.append(f"effect committed twice: {seen[identity]} and {key}")
        seen[identity] = key
    for key in sorted(set(committed_before or {}) - kept):
        audit.problems.append(f"committed effect {key} lost")
    return audit
