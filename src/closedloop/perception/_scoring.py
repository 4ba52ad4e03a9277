"""Scoring an answer into an ``Observation``: pure, no I/O (``HttpTool`` does the I/O).

The last good answer is kept per request; an empty answer replaces it ("no match" is
newer news than an older match), and a fallback to an empty one says so.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from pydantic import BaseModel, ValidationError

from .._validation import require_int_at_least, require_positive, require_unit_interval
from ._observation import EMPTY_MEANING, Observation
from ._paths import is_blank, resolve
from ._retry_after import parse_retry_after

__all__ = ["ConfidencePolicy", "LastGoodCache", "ResponseScorer"]


@dataclass(frozen=True, slots=True)
class ConfidencePolicy:
    """The confidence ``HttpTool`` gives each kind of answer.

    ==========================================  ============  =====  ======================
    answer                                      status        conf.  value
    ==========================================  ============  =====  ======================
    2xx, valid, key fields present              ok            1.0    the data
    2xx, ``[]``/``{}``/``null``/empty result    empty         0.9    the data (no match)
    2xx with no body                            empty         0.5    ``[]``
    2xx, schema fails or key fields missing     partial       0.6    last good, else data
    2xx unusable body (bad JSON, wrong type,    stale /       0.7 /  last good /
    oversized) or 5xx                           error         0.2    None
    429                                         rate_limited  0.0    None, plus an event
    other 4xx, 3xx                              error         0.0    None
    network error                               error         0.1    None
    no answer within the timeout                timeout       0.7 /  last good /
                                                              0.1    None
    ==========================================  ============  =====  ======================

    Empty gets 0.9, not 1.0: the source answered properly, but an empty answer is also
    what a silently broken index returns. Timeouts with a cached answer use ``stale``.
    """

    ok: float = 1.0
    partial: float = 0.6
    empty: float = 0.9
    no_content: float = 0.5
    stale: float = 0.7
    server_error: float = 0.2
    network_error: float = 0.1
    timeout: float = 0.1
    client_error: float = 0.0

    def __post_init__(self) -> None:
        for f in fields(self):
            require_unit_interval(f.name, getattr(self, f.name))


@dataclass(frozen=True, slots=True)
class Cached:
    value: Any
    at: float
    empty: bool  # the last good answer was "no match"; a fallback must say so

    def phrase(self, age: float) -> str:
        said = f" (it was empty: {EMPTY_MEANING})" if self.empty else ""
        return f"the last good answer from {age:.1f} s ago{said}"


class LastGoodCache:
    """Last good answer per request key, bounded (oldest out first), optionally aged out."""

    def __init__(self, size: int = 128, max_age_s: float | None = None) -> None:
        self.size = require_int_at_least("cache_size", size, 0)
        self.max_age_s = (
            None if max_age_s is None else require_positive("cache_max_age_s", max_age_s)
        )
        self._entries: OrderedDict[str, Cached] = OrderedDict()

    def put(self, key: str, value: Any, now: float, *, empty: bool) -> None:
        if self.size == 0:
            return
        self._entries[key] = Cached(value, now, empty)
        self._entries.move_to_end(key)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)

    def get(self, key: str, now: float) -> Cached | None:
        cached = self._entries.get(key)
        if cached is not None and self.max_age_s is not None and now - cached.at > self.max_age_s:
            del self._entries[key]
            return None
        return cached

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


def json_like(content_type: str) -> bool:
    """True for no content type, ``application/json``, ``text/json`` and ``*+json``."""
    return (
        not content_type
        or content_type in ("application/json", "text/json")
        or content_type.endswith("+json")
    )


def decode_text(content: bytes, charset: str) -> str:
    """The body as text for ``raw`` (undecodable bytes replaced, never an error)."""
    try:
        return content.decode(charset, errors="replace")
    except LookupError:
        return content.decode("utf-8", errors="replace")


def parse_body(content: bytes, charset: str) -> tuple[Any, str | None]:
    """Strict JSON (no NaN/Infinity; a UTF-8 byte-order mark tolerated): (data, problem)."""
    if charset.lower().replace("_", "-") in ("utf-8", "utf8"):
        charset = "utf-8-sig"
    try:
        text = content.decode(charset)
    except (UnicodeDecodeError, LookupError) as exc:
        return None, f"body is not valid {charset}: {exc}"

    def no_constants(name: str) -> Any:
        raise ValueError(f"non-standard JSON constant {name}")

    try:
        return json.loads(text, parse_constant=no_constants), None
    except json.JSONDecodeError as exc:
        return None, f"invalid JSON: {exc.msg} at char {exc.pos}"
    except (ValueError, RecursionError) as exc:
        return None, f"invalid JSON: {exc or 'nested too deeply'}"


def _first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(p) for p in error["loc"]) or "$"
    return f"{where}: {error['msg']}"


class ResponseScorer:
    """Turns one source's answers into observations, remembering its last good ones."""

    def __init__(
        self,
        source: str,
        *,
        response_schema: type[BaseModel] | None,
        key_fields: Sequence[str],
        result_field: str | None,
        confidence: ConfidencePolicy,
        cache: LastGoodCache,
    ) -> None:
        self.source = source
        self.response_schema = response_schema
        self.key_fields = tuple(key_fields)
        self.result_field = result_field
        self.confidence = confidence
        self.cache = cache

    def _context(self, now: float, raw: Any = None, latency: float | None = None) -> dict[str, Any]:
        """The keywords every observation of this source shares: who, when, what came back."""
        context: dict[str, Any] = {"source": self.source, "timestamp": now, "latency_s": latency}
        if raw is not None:  # Observation.timeout takes no raw answer
            context["raw"] = raw
        return context

    # --- answers with a status code -------------------------------------------------

    def score_response(
        self,
        key: str,
        *,
        status: int,
        headers: Mapping[str, str],
        content: bytes,
        charset: str,
        latency: float,
        now: float,
        oversized_note: str | None = None,
    ) -> Observation:
        """Score an HTTP answer; ``oversized_note`` says the body was cut while reading."""
        raw = decode_text(content, charset)
        retry_after = parse_retry_after(headers.get("retry-after"), now)
        if status == 429:
            return Observation.rate_limited(
                retry_after_s=retry_after,
                **self._context(now, raw, latency),
            )
        if status >= 500:
            return self.fallback(key, f"HTTP {status}", raw, latency, now, retry_after)
        if not 200 <= status < 300:
            return Observation.failed(
                f"HTTP {status}",
                confidence=self.confidence.client_error,
                meaning=f"{self.source} refused the request (HTTP {status}); no data",
                retry_after_s=retry_after,
                **self._context(now, raw, latency),
            )
        if oversized_note is not None:
            return self.fallback(key, oversized_note, raw, latency, now)
        if not content.strip():
            return Observation.empty(
                confidence=self.confidence.no_content,
                meaning=f"{EMPTY_MEANING} ({self.source} sent HTTP {status} with no body)",
                **self._context(now, latency=latency),
            )
        content_type = headers.get("content-type", "").split(";")[0].strip().lower()
        data, problem = parse_body(content, charset)
        if problem is not None:
            if not json_like(content_type):
                problem = f"expected JSON, got {content_type} ({problem})"
            return self.fallback(key, problem, raw, latency, now)
        served = "" if json_like(content_type) else f" (served as {content_type})"
        return self.score_data(key, data, raw=raw, latency=latency, now=now, served=served)

    # --- parsed data ----------------------------------------------------------------

    def score_data(
        self, key: str, data: Any, *, raw: Any, latency: float | None, now: float, served: str = ""
    ) -> Observation:
        """Score parsed data: empty, partial (schema or key fields) or ok."""
        if data is None or (isinstance(data, list | dict) and not data):
            return self._empty(key, data, raw, latency, now, "the whole answer is empty" + served)
        problems: list[str] = []
        value = data
        if self.response_schema is not None:
            try:
                value = self.response_schema.model_validate(data).model_dump(mode="json")
            except ValidationError as exc:
                problems.append(f"schema: {exc.error_count()} error(s), first: {_first_error(exc)}")
            except RecursionError:
                problems.append("schema: answer nested too deeply to validate")
        required = self.key_fields
        if self.result_field is not None and self.result_field not in required:
            required = (*required, self.result_field)
        missing = [p for p in required if resolve(data, p)[1] is None]
        if missing:
            problems.append(f"key fields missing: {', '.join(missing)}")
        if problems:
            return self._partial(key, data, raw, latency, now, missing, "; ".join(problems))
        if self.result_field is not None and is_blank(resolve(data, self.result_field)[1]):
            detail = f"{self.result_field} is empty{served}"
            return self._empty(key, value, raw, latency, now, detail)
        self.cache.put(key, value, now, empty=False)
        return Observation.ok(
            value,
            confidence=self.confidence.ok,
            meaning=f"{self.source} answered with a complete result{served}",
            **self._context(now, raw, latency),
        )

    def _empty(
        self, key: str, value: Any, raw: Any, latency: float | None, now: float, detail: str
    ) -> Observation:
        self.cache.put(key, value, now, empty=True)
        return Observation.empty(
            value=value,
            confidence=self.confidence.empty,
            meaning=f"{EMPTY_MEANING} ({self.source}: {detail})",
            **self._context(now, raw, latency),
        )

    def _partial(
        self,
        key: str,
        data: Any,
        raw: Any,
        latency: float | None,
        now: float,
        missing: list[str],
        problem: str,
    ) -> Observation:
        cached = self.cache.get(key, now)
        age = None if cached is None else max(0.0, now - cached.at)
        if cached is not None and age is not None:
            value = cached.value
            meaning = (
                f"{self.source}'s fresh answer is incomplete ({problem}); value is "
                f"{cached.phrase(age)}, not the fresh one"
            )
        else:
            value = data
            meaning = (
                f"{self.source}'s answer is incomplete ({problem}); value is that incomplete "
                "answer, no earlier one is cached"
            )
        return Observation.partial(
            value,
            missing=missing,
            confidence=self.confidence.partial,
            meaning=meaning,
            age_s=age,
            error=problem,
            **self._context(now, raw, latency),
        )

    # --- no usable answer -----------------------------------------------------------

    def fallback(
        self,
        key: str,
        error: str,
        raw: Any,
        latency: float | None,
        now: float,
        retry_after: float | None = None,
    ) -> Observation:
        """A server-side fault: the last good answer as stale, else an error."""
        cached = self.cache.get(key, now)
        if cached is not None:
            age = max(0.0, now - cached.at)
            return Observation.stale(
                cached.value,
                age_s=age,
                confidence=self.confidence.stale,
                meaning=f"{self.source} failed ({error}); value is {cached.phrase(age)}",
                error=error,
                retry_after_s=retry_after,
                **self._context(now, raw, latency),
            )
        return Observation.failed(
            error,
            confidence=self.confidence.server_error,
            meaning=f"{self.source} failed ({error}) and no earlier answer is cached; no data",
            retry_after_s=retry_after,
            **self._context(now, raw, latency),
        )

    def timed_out(self, key: str, timeout: float, latency: float, now: float) -> Observation:
        """No answer in time: the last good answer under status timeout, else nothing."""
        cached = self.cache.get(key, now)
        if cached is None:
            return Observation.timeout(
                timeout_s=timeout,
                confidence=self.confidence.timeout,
                **self._context(now, latency=latency),
            )
        age = max(0.0, now - cached.at)
        return Observation.timeout(
            timeout_s=timeout,
            value=cached.value,
            age_s=age,
            confidence=self.confidence.stale,
            meaning=f"{self.source} did not answer within {timeout:.3g} s; value is "
            f"{cached.phrase(age)}",
            **self._context(now, latency=latency),
        )

    def unreachable(self, error: str, latency: float, now: float) -> Observation:
        """A network fault: nothing was learned."""
        return Observation.failed(
            error,
            confidence=self.confidence.network_error,
            meaning=f"{self.source} could not be reached ({error}); no data",
            **self._context(now, latency=latency),
        )

    def not_called(self, error: str, now: float) -> Observation:
        """The call's arguments could not form a request; nothing was sent."""
        return Observation.failed(
            error,
            meaning=f"{self.source} was not called: {error}",
            **self._context(now),
        )
