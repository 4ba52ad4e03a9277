"""Pre-warmed disturbance estimates and fingerprints: the first step starts informed.

Before a run starts, :func:`prewarm` estimates its f_est from cheap signals so the first
step already runs under the right protocol: the fingerprint of the same query key (what
earlier runs of it ended with, cached with a TTL in the store's records), else the family
fingerprint (the task's domain), blended with the recent error history of the tools the
run will call (the ``ControllerBank``'s per-step-type records). The result goes into
``ControlConfig.prior_f_est`` (it holds until the run's ESO has its own estimate) and the
tool histories can be copied into the run's own store so its PIDs warm-start too.

:func:`query_features` turns a query into the small feature vector the gain predictor
reads; :func:`trace_with_notes` puts warnings (a stale gain table, the pre-warm's source)
into the first record of a run's trace.
"""

from __future__ import annotations

import hashlib
import re
import time
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._validation import require_non_negative, require_positive, require_unit_interval
from ..feedback import StateStore
from ._records import RunResult, StepRecord
from ._trace import TraceSink

__all__ = [
    "Fingerprint",
    "FingerprintCache",
    "Prewarm",
    "family_key",
    "prewarm",
    "query_features",
    "query_key",
    "seed_history",
    "trace_with_notes",
]

_SPACE = re.compile(r"\s+")


def query_key(text: str) -> str:
    """A stable key for a query: NFKC, lower case, collapsed spaces, hashed."""
    norm = _SPACE.sub(" ", unicodedata.normalize("NFKC", text).strip().lower())
    return hashlib.blake2b(norm.encode("utf-8"), digest_size=10).hexdigest()


def family_key(family: str) -> str:
    """The fingerprint key of a task family (a domain)."""
    return f"family:{family}"


def query_features(text: str, domain: str, domains: Sequence[str]) -> tuple[float, ...]:
    """Cheap features of a query: its domain (one-hot over ``domains``), length, share
    of digits and of CJK characters, and how many items it lists (separators)."""
    n = max(1, len(text))
    digits = sum(c.isdigit() for c in text)
    cjk = sum("\u4e00" <= c <= "\u9fff" for c in text)
    items = sum(text.count(s) for s in ("、", ",", "，", " and ", "和", ";", "；"))
    onehot = tuple(1.0 if d == domain else 0.0 for d in domains)
    return (*onehot, min(1.0, len(text) / 200.0), digits / n, cjk / n, min(1.0, items / 5.0))


@dataclass(frozen=True, slots=True)
class Fingerprint:
    """What earlier runs of one key ended with: f_est, first-step error, how many, when."""

    f_est: float
    first_error: float
    runs: int
    at: float


class FingerprintCache:
    """Per-key disturbance fingerprints in a store's records, each fresh for ``ttl_s``.

    ``remember`` blends a new run into the key's fingerprint (an average over runs, so one
    unlucky run does not decide the next one's protocol); ``recall`` returns None for an
    unknown or expired key. ``clock`` is injectable (tests never wait for a TTL).
    """

    def __init__(
        self,
        store: StateStore,
        *,
        namespace: str = "fingerprints",
        ttl_s: float = 3600.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.namespace = namespace
        self.ttl_s = require_positive("ttl_s", ttl_s)
        self.clock = clock

    async def recall(self, key: str) -> Fingerprint | None:
        """The fingerprint of ``key``; None when unknown, expired or damaged."""
        record = await self.store.record_get(self.namespace, key)
        if record is None:
            return None
        value = record.value
        try:
            found = Fingerprint(
                float(value["f_est"]),  # type: ignore[arg-type]
                float(value["first_error"]),  # type: ignore[arg-type]
                int(value["runs"]),  # type: ignore[arg-type]
                float(value["at"]),  # type: ignore[arg-type]
            )
        except (KeyError, TypeError, ValueError):
            return None  # a damaged fingerprint is no fingerprint
        if self.clock() - found.at > self.ttl_s:
            return None
        return found

    async def remember(self, key: str, f_est: float, first_error: float) -> Fingerprint:
        """Blend one run's f_est and first-step error into the fingerprint of ``key``."""
        f = require_unit_interval("f_est", f_est)
        e = require_unit_interval("first_error", first_error)
        old = await self.recall(key)
        runs = 1 if old is None else old.runs + 1
        if old is not None:
            f = old.f_est + (f - old.f_est) / runs
            e = old.first_error + (e - old.first_error) / runs
        found = Fingerprint(f, e, runs, self.clock())
        value = {"f_est": f, "first_error": e, "runs": runs, "at": found.at}
        await self.store.record_put(self.namespace, key, value)
        return found

    async def remember_run(self, result: RunResult, *, query: str, family: str) -> None:
        """Fingerprint a finished run under its query and its family, the two keys
        :func:`prewarm` looks up.

        The run's disturbance is its peak f_est; a run too short for the ESO to estimate
        (f_est stayed 0) counts its mean step error instead (the shortfall the ESO's
        fallback uses), so short runs leave a fingerprint too.
        """
        if not result.steps:
            return
        f_est = max(s.f_est for s in result.steps)
        if f_est == 0.0:
            f_est = sum(s.error for s in result.steps) / len(result.steps)
        for key in (query_key(query), family_key(family)):
            await self.remember(key, f_est, result.steps[0].error)


@dataclass(frozen=True, slots=True)
class Prewarm:
    """A pre-run estimate: the prior f_est, where it came from, and the tools' histories."""

    f_est: float | None
    source: str
    tool_errors: Mapping[str, tuple[float, ...]]

    def note(self) -> str:
        """One line for the trace: the prior f_est and its source, or a cold start."""
        if self.f_est is None:
            return "pre-warm: no history, the run starts cold"
        return f"pre-warm: prior f_est {self.f_est:.2f} from {self.source}"

    async def seed(self, store: StateStore, *, namespace: str = "control", window: int = 10) -> int:
        """Copy the tools' recent errors into a run's store so its PIDs warm-start; returns
        how many step types were seeded."""
        return await seed_history(store, self, namespace=namespace, window=window)


def _errors(value: Mapping[str, Any]) -> tuple[float, ...]:
    raw = value.get("errors", ())
    if not isinstance(raw, list | tuple):
        return ()
    return tuple(
        min(1.0, max(0.0, float(e)))
        for e in raw
        if isinstance(e, int | float) and not isinstance(e, bool)
    )


async def prewarm(
    cache: FingerprintCache,
    *,
    query: str,
    family: str,
    tools: Sequence[str],
    history: StateStore | None = None,
    history_namespace: str = "control",
    tool_weight: float = 0.5,
) -> Prewarm:
    """The prior f_est of a run about to start (None when nothing is known).

    The query's own fingerprint wins; else the family's; either is blended with the mean
    recent error of ``tools`` (weight ``tool_weight``) when ``history`` holds any.
    """
    require_unit_interval("tool_weight", tool_weight)
    tool_errors: dict[str, tuple[float, ...]] = {}
    if history is not None:
        for name in tools:
            record = await history.record_get(history_namespace, name)
            if record is not None and (errs := _errors(record.value)):
                tool_errors[name] = errs
    base: float | None = None
    source = "nothing"
    own = await cache.recall(query_key(query))
    if own is not None:
        base, source = own.f_est, f"query fingerprint ({own.runs} runs)"
    else:
        fam = await cache.recall(family_key(family))
        if fam is not None:
            base, source = fam.f_est, f"family '{family}' fingerprint ({fam.runs} runs)"
    if tool_errors:
        flat = [e for errs in tool_errors.values() for e in errs]
        tool_mean = sum(flat) / len(flat)
        if base is None:
            base, source = tool_mean, f"tool history ({len(flat)} errors)"
        else:
            base = (1 - tool_weight) * base + tool_weight * tool_mean
            source += f" + tool history ({len(flat)} errors)"
    return Prewarm(None if base is None else min(1.0, max(0.0, base)), source, tool_errors)


async def seed_history(
    store: StateStore, warm: Prewarm, *, namespace: str = "control", window: int = 10
) -> int:
    """Copy the tools' recent errors into a run's store so its PIDs warm-start; returns
    how many step types were seeded."""
    require_non_negative("window", window)
    for name, errors in warm.tool_errors.items():
        await store.record_put(namespace, name, {"errors": list(errors[-window:])})
    return len(warm.tool_errors)


class _NotedTrace:
    def __init__(self, sink: TraceSink, notes: Sequence[str]) -> None:
        self.sink = sink
        self.pending = [n for n in notes if n]

    async def write(self, record: StepRecord) -> None:
        if self.pending:
            record = record.model_copy(update={"notes": [*self.pending, *record.notes]})
            self.pending = []
        await self.sink.write(record)

    async def close(self, result: RunResult) -> None:
        await self.sink.close(result)


def trace_with_notes(sink: TraceSink, notes: Sequence[str]) -> TraceSink:
    """``sink`` with ``notes`` (warnings, the pre-warm's source) on the run's first record."""
    return _NotedTrace(sink, notes)
