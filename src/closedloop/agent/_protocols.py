"""The defence protocols' mechanics: a vote over samples, audits, past successes.

``DUAL_VERIFICATION`` (and a high control signal, through the ``votes`` actuator) draws
several independent samples of the step's action and runs the call most of them make
(self-consistency, Wang et al. 2023); the share that disagrees is a measured error of
the proposal. ``MANUAL_HANDOVER`` needs an audit a person can act on: what was observed, which
checks failed (the trace module's ``build_audit``), and a suggested fix drawn from the
nearest past success of the same step type, kept here in a small store namespace.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._exceptions import ConfigurationError
from ..execution import canonical_json, normalise
from ..feedback import StateStore
from ..feedback._json import checked_document
from ..models import Completion, Confidence
from ..models._confidence import agreement_of
from ..perception import error_similarity
from ._actions import Proposal

__all__ = [
    "SuccessMemory",
    "Vote",
    "intersect",
    "proposal_confidence",
    "proposal_key",
    "same_value",
    "vote",
]

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


@dataclass(frozen=True, slots=True)
class Vote:
    """The outcome of a vote over a step's samples.

    ``proposal`` is the majority's (never an empty stand-in: it is one sample's own
    proposal), ``disagreement`` the share of samples outside the majority, in [0, 1]
    (a measured error of the proposal), ``support`` how many samples made the majority
    call out of ``samples``.
    """

    proposal: Proposal
    note: str
    disagreement: float
    support: int
    samples: int


_KEY_ENCODER = json.JSONEncoder(sort_keys=True, default=repr)
"""Built once: ``json.dumps`` with options builds a new encoder for every call."""


def proposal_key(proposal: Proposal) -> str:
    """The normalised call a proposal makes, for voting: its kind and what it does, up to
    key order, whitespace, case and ``3`` versus ``3.0``."""
    if proposal.kind == "tool":
        assert proposal.call is not None
        what: Any = [proposal.call.tool, proposal.call.arguments]
    elif proposal.kind == "final":
        what = [proposal.answer or "", dict(proposal.fields)]
    elif proposal.kind == "plan":
        what = list(proposal.plan)
    else:
        what = None
    return _KEY_ENCODER.encode([proposal.kind, _norm(what)])


def vote(proposals: Sequence[Proposal], weights: Sequence[float | None] | None = None) -> Vote:
    """Self-consistency (Wang et al. 2023): the call most samples make.

    Samples that are not a valid action count against every call. A call runs only with
    more than half of the samples behind it; with none (two samples that differ, a tie)
    the proposal is refused as invalid, so the step asks again rather than run a call
    the samples dispute, and never runs a call emptied of its disputed arguments.

    With ``weights`` (each sample's confidence, all read) each sample counts by its
    weight instead of one: confidence-weighted self-consistency (Taubenfeld et al. 2025),
    so two unsure samples at temperature no longer outvote a sure greedy one; "more than
    half" is then of the total weight.
    """
    if not proposals:
        raise ConfigurationError("proposals", list(proposals), "a vote needs at least one sample")
    n = len(proposals)
    w = _weights(weights, n)
    groups: dict[str, list[int]] = {}
    for i, p in enumerate(proposals):
        if p.kind != "invalid":
            groups.setdefault(proposal_key(p), []).append(i)
    if not groups:
        return Vote(proposals[0], f"vote: none of the {n} samples was a valid action", 1.0, 0, n)
    best = max(groups.values(), key=lambda idx: (sum(w[i] for i in idx), len(idx), -idx[0]))
    support = len(best)
    winner = proposals[best[0]]
    share = sum(w[i] for i in best) / sum(w)
    disagreement = 1.0 - share
    if n == 1:
        return Vote(winner, "", 0.0, 1, 1)
    weighed = "" if weights is None or w == [1.0] * n else f" ({share:.0%} of the confidence)"
    if support == n:
        note = f"vote: all {n} samples agree"
    elif share * 2 > 1.0:
        note = f"vote: {support} of {n} samples agree{weighed}; the majority call runs"
    else:
        note = (
            f"vote: no majority ({support} of {n} samples agree on the most common call); "
            "nothing runs, the model is asked again"
        )
        refused = Proposal("invalid", errors=(f"the {n} samples disagreed: {note}",))
        return Vote(refused, note, disagreement, support, n)
    return Vote(winner, note, disagreement, support, n)


def _weights(weights: Sequence[float | None] | None, n: int) -> list[float]:
    # Every sample's weight, or one each where a weight is missing or none is positive.
    if weights is None or len(weights) != n or any(x is None for x in weights):
        return [1.0] * n
    clean = [max(0.0, float(x)) for x in weights if x is not None]
    return clean if sum(clean) > 0.0 else [1.0] * n


def proposal_confidence(
    proposals: Sequence[Proposal], completions: Sequence[Completion]
) -> Confidence:
    """The sensors' reading on a step's samples, before any call runs: agreement and margin
    over the normalised calls, and the decision-token logprobs of the first sample that
    makes the most common call (``completions[i]`` produced ``proposals[i]``)."""
    keys = [None if p.kind == "invalid" else proposal_key(p) for p in proposals]
    agreement, margin = agreement_of(keys)
    valid = [k for k in keys if k is not None]
    top = max(valid, key=valid.count) if valid else None
    index = keys.index(top) if top is not None else 0
    sensed = completions[index].confidence if index < len(completions) else None
    fields = {} if sensed is None else sensed.model_dump(exclude={"samples", "agreement", "margin"})
    multi = len(proposals) > 1
    return Confidence(
        **fields,
        samples=len(proposals),
        agreement=agreement if multi else None,
        margin=margin if multi else None,
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
        # A fresh dict: checked and encoded once, not copied again by the store.
        value = {
            "step_type": step_type,
            "run_id": run_id,
            "task": task[:500],
            "arguments": json.loads(text),
            "observed": observed[:500],
        }
        written = await self.store.record_put(self.namespace, key, checked_document(value, "value"))
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
