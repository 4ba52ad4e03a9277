"""The defence protocols' mechanics: agreement of two samples, audits, past successes.

``DUAL_VERIFICATION`` keeps only what two independent samples agree on; disagreement
drops the field, so the validator or the completion predicate refuses what is left
unsure. ``MANUAL_HANDOVER`` needs an audit a person can act on: what was observed, which
checks failed (the trace module's ``build_audit``), and a suggested fix drawn from the
nearest past success of the same step type, kept here in a small store namespace.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from .._exceptions import ConfigurationError
from ..execution import canonical_json, normalise
from ..feedback import StateStore
from ..perception import error_similarity
from ._actions import Proposal
from ._records import ActionCall

__all__ = ["SuccessMemory", "agree", "intersect", "same_value"]

_MISSING = object()


def _norm(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _norm(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, list | tuple):
        return [_norm(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        return " ".join(value.split()).casefold()
    return value


def same_value(a: Any, b: Any) -> bool:
    """Equal up to key order, whitespace, case and ``3`` versus ``3.0``."""
    return bool(_norm(a) == _norm(b))


def intersect(a: Mapping[str, Any], b: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The fields of ``a`` that ``b`` agrees on (nested objects field by field), and the
    dotted names of the fields dropped for disagreeing or for being absent from one side."""
    kept: dict[str, Any] = {}
    dropped: list[str] = []
    for key in sorted(set(a) | set(b)):
        left, right = a.get(key, _MISSING), b.get(key, _MISSING)
        if left is _MISSING or right is _MISSING:
            dropped.append(key)
        elif isinstance(left, Mapping) and isinstance(right, Mapping):
            inner, lost = intersect(left, right)
            if inner:
                kept[key] = inner
            dropped.extend(f"{key}.{name}" for name in lost)
            if not inner and not lost:
                kept[key] = {}
        elif same_value(left, right):
            kept[key] = left
        else:
            dropped.append(key)
    return kept, dropped


def agree(first: Proposal, second: Proposal) -> tuple[Proposal, str]:
    """The proposal both samples support, and a note saying what was dropped."""
    if first.kind == "invalid" or second.kind == "invalid":
        bad = first if first.kind == "invalid" else second
        return bad, "dual verification: one sample was not a valid action"
    if first.kind != second.kind:
        return (
            Proposal(
                "invalid",
                errors=(
                    f"dual verification: the samples disagreed ({first.kind} vs {second.kind}); "
                    "nothing was agreed",
                ),
            ),
            "dual verification: the two samples proposed different kinds of action",
        )
    if first.kind == "tool":
        assert first.call is not None and second.call is not None
        if first.call.tool != second.call.tool:
            return (
                Proposal(
                    "invalid",
                    errors=(
                        f"dual verification: the samples called different tools "
                        f"({first.call.tool} vs {second.call.tool}); nothing was agreed",
                    ),
                ),
                "dual verification: the samples chose different tools",
            )
        arguments, dropped = intersect(first.call.arguments, second.call.arguments)
        call = ActionCall(tool=first.call.tool, arguments=arguments)
        note = _dropped_note("arguments", dropped)
        return Proposal("tool", call=call, notes=(*first.notes, note)), note
    if first.kind == "final":
        fields, dropped = intersect(first.fields, second.fields)
        note = _dropped_note("fields", dropped)
        return Proposal("final", answer=first.answer, fields=fields, notes=(note,)), note
    if same_value(list(first.plan), list(second.plan)):
        return first, "dual verification: the two plans agree"
    return (
        Proposal("invalid", errors=("dual verification: the two samples planned differently",)),
        "dual verification: the two plans differ",
    )


def _dropped_note(what: str, dropped: Sequence[str]) -> str:
    if not dropped:
        return f"dual verification: the two samples agree on every {what[:-1]}"
    return (
        f"dual verification: the two samples disagreed on {what} {', '.join(dropped)}; "
        "only agreed values were kept"
    )


class SuccessMemory:
    """Successful steps by step type, for the handover's suggested fix.

    Keys are ``<step type>/<digest of the arguments>``; at most ``per_type`` are kept per
    step type (the oldest go first). One memory serves one run: it lists a step type's
    successes once, on the first it remembers, and keeps that view up to date with its
    own writes, so remembering costs one write, not a read, a write and a listing.
    Successes another run adds meanwhile are counted by the next run that lists them.
    """

    def __init__(self, store: StateStore, namespace: str = "successes", per_type: int = 20):
        self.store = store
        self.namespace = namespace
        self.per_type = per_type
        self._seen: dict[str, dict[str, float]] = {}  # step type -> key -> updated_at

    async def remember(
        self,
        step_type: str,
        *,
        run_id: str,
        task: str,
        arguments: Mapping[str, Any],
        observed: str,
    ) -> None:
        text = _canonical(arguments)
        digest = hashlib.sha256(text.encode("utf-8", errors="surrogatepass")).hexdigest()[:16]
        key = f"{step_type}/{digest}"
        seen = self._seen.get(step_type)
        if seen is None:
            listed = await self.store.record_list(self.namespace, f"{step_type}/")
            seen = self._seen[step_type] = {r.key: r.updated_at for r in listed}
        # Overwriting a known success adds none: only a new key can push the count over.
        known = key in seen
        written = await self.store.record_put(
            self.namespace,
            key,
            {
                "step_type": step_type,
                "run_id": run_id,
                "task": task[:500],
                "arguments": json.loads(text),
                "observed": observed[:500],
            },
        )
        seen[key] = written.updated_at
        if known or len(seen) <= self.per_type:
            return
        oldest = sorted(seen, key=lambda k: seen[k])[: len(seen) - self.per_type]
        for old in oldest:
            await self.store.record_delete(self.namespace, old)
            del seen[old]

    async def nearest(self, step_type: str, arguments: Mapping[str, Any]) -> dict[str, Any] | None:
        """The past success most like this call: same step type first, then any."""
        records = await self.store.record_list(self.namespace, f"{step_type}/")
        if not records:
            records = await self.store.record_list(self.namespace)
        if not records:
            return None
        here = _canonical(arguments)

        def score(record: Any) -> tuple[float, float]:
            there = _canonical(record.value.get("arguments", {}))
            return (-error_similarity(here, there), record.updated_at)

        best = max(records, key=score)
        fix = best.to_dict()
        fix["suggestion"] = (
            f"a past run succeeded at {fix.get('step_type')} with arguments "
            f"{_canonical(fix.get('arguments', {}))}: {fix.get('observed', '')}"
        )
        return fix


def _canonical(value: Any) -> str:
    try:
        return canonical_json(normalise(dict(value)))
    except (ConfigurationError, TypeError, ValueError):
        return json.dumps(repr(value))
