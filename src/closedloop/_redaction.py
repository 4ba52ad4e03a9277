"""Secret redaction: the detectors, the secret values known to this process, the scrubbers.

Two passes share the detectors here. :func:`redact` is what an exported artefact goes
through (traces, spans, audits, logs, the service's error bodies): credential-named keys
lose their value, bearer tokens, API keys, JWTs and ``key=...`` parameters become
``"[redacted]"``. :func:`scrub` is the persistence boundary (every state store write, every
service answer): text only, since a store's own fields (an API key record's ``hash``) are
named like credentials and must stay readable, and ``key=...`` only inside a URL's query
string, since a stored tool argument (``sorted(xs, key=len)``) must still run on resume.

Both also replace every secret *value* this process has resolved or detected (see
``closedloop.execution.Secret``) by its reference, ``{{secret:NAME}}``, wherever it
appears. The known values live in one process-wide table: a value resolved in one run
must not reach the store through another run's record, a log line or an API answer, and
none of those knows which run it belongs to. Values shorter than
:data:`MIN_KNOWN_LENGTH` are not scrubbed by value: replacing a four-character string
everywhere would corrupt ordinary text and ids.
"""

from __future__ import annotations

import collections
import functools
import itertools
import json
import re
import threading
from collections.abc import Mapping
from typing import Any

__all__ = [
    "MIN_KNOWN_LENGTH",
    "REDACTED",
    "REFERENCE",
    "detected_secrets",
    "is_secret_key",
    "might_hold_secret",
    "redact",
    "reference",
    "remember_secret",
    "scrub",
    "scrub_document",
    "self_evident",
]

REDACTED = "[redacted]"
"""What a secret is replaced with when no reference names it."""

MIN_KNOWN_LENGTH = 8
"""The shortest secret value scrubbed by value wherever it appears."""

_NAME = r"[A-Za-z_][A-Za-z0-9_./\-]{0,127}"
REFERENCE = re.compile(r"\{\{secret:(" + _NAME + r")\}\}")
"""A secret reference in text, ``{{secret:NAME}}``; group 1 is the name."""

_VALID_NAME = re.compile(_NAME)


def reference(name: str) -> str:
    """The reference text of the secret ``name``: ``{{secret:NAME}}``."""
    return "{{secret:" + name + "}}"


def valid_name(name: object) -> bool:
    """Whether ``name`` can be written in a reference."""
    return isinstance(name, str) and _VALID_NAME.fullmatch(name) is not None


# --- the detectors -------------------------------------------------------------------------

# Whole words of a key ("prompt_tokens" is a usage counter, "access_token" is a secret).
_SECRET_WORDS = frozenset(
    {"token", "secret", "password", "passwd", "authorization", "apikey", "cookie", "credentials"}
)
_SECRET_PAIRS = frozenset({("api", "key"), ("private", "key"), ("access", "key")})
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_NON_WORD = re.compile(r"[^a-z0-9]+")
_SECRET_TEXT = re.compile(
    # A bearer credential: needs a digit or punctuation, or length, so "Bearer of news" stays.
    r"(?i:\bbearer\s+)(?:(?=[A-Za-z]*[0-9\-._~+/])[A-Za-z0-9\-._~+/]{8,}|[A-Za-z]{20,})=*"
    r"|\bsk-(?=[A-Za-z0-9_\-]*[0-9])[A-Za-z0-9_\-]{20,}"  # OpenAI / Anthropic style keys
    r"|\b[rs]k_(?:live|test)_[A-Za-z0-9]{16,}"  # Stripe
    r"|\bgh[pousr]_[A-Za-z0-9]{30,}"  # GitHub
    r"|\bxox[abprs]-[A-Za-z0-9\-]{10,}"  # Slack
    r"|\bAKIA[0-9A-Z]{16}\b"  # AWS access key ids
    r"|\beyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"  # JWTs
)
_SECRET_PARAM = re.compile(
    # A reference after the '=' is what a secret should be: it stays readable.
    r"(?i)(\b(?:api[_-]?key|access[_-]?token|token|password|secret|key)=)(?!\{\{secret:)"
    r"[^&\s#\"']+"
)
# The same parameters inside a URL's query string only. ``key=`` and ``token=`` are
# ordinary code (``sorted(xs, key=len)``, ``f(token=tok)``): what is stored must stay
# runnable for a resumed task, so the store's scrub and the run's adoption of secrets take
# a parameter for a credential only where a query string puts it.
_SECRET_QUERY = re.compile(
    r"(?i)([?&;](?:api[_-]?key|access[_-]?token|token|password|secret|key)=)(?!\{\{secret:)"
    r"[^&\s#\"']+"
)
_BEARER = re.compile(r"(?i)bearer\s+")
# Every detector above needs one of these in the lower-cased text, unescaped in JSON too
# (their characters are never escaped): where none occurs, no detector can match any
# string of a document, and one substring search each is far cheaper than a regex.
_LITERALS = (
    "bearer",
    "sk-",
    "k_live_",
    "k_test_",
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "ghr_",
    "xox",
    "akia",
    "eyj",
)
# The parameters' literals, looked for only where the text has an '=' at all (a state
# document seldom has one: one search instead of four).
_PARAM_LITERALS = ("key=", "token=", "password=", "secret=")


@functools.lru_cache(maxsize=4096)
def is_secret_key(key: str) -> bool:
    """Whether a mapping key names a credential (``api_key``, ``Authorization``, ...)."""
    # Cached: every trace line and audit asks again about the same few dozen field names.
    words = _NON_WORD.split(_CAMEL.sub("_", key).lower())
    if any(word in _SECRET_WORDS for word in words):
        return True
    return any(pair in _SECRET_PAIRS for pair in itertools.pairwise(words))


_SHORTEST_SECRET = 5
"""No pattern matches fewer characters (``key=x``): shorter text is left as it is."""


def self_evident(value: str) -> bool:
    """Whether the detectors recognise ``value`` on its own, wherever it appears (an API
    key's or a JWT's form): such a value needs no remembering to be scrubbed."""
    return _SECRET_TEXT.fullmatch(value) is not None


def detected_secrets(text: str) -> list[str]:
    """The secret values the detectors find in ``text`` (a bearer token without its
    ``Bearer``, a parameter's value without its ``key=``), in order, each once."""
    if len(text) < _SHORTEST_SECRET:
        return []
    found: list[str] = []
    for match in _SECRET_TEXT.finditer(text):
        value = match.group(0)
        prefix = _BEARER.match(value)
        found.append(value[prefix.end() :] if prefix else value)
    if "=" in text:
        found.extend(m.group(0)[len(m.group(1)) :] for m in _SECRET_QUERY.finditer(text))
    return list(dict.fromkeys(v for v in found if not REFERENCE.fullmatch(v)))


# --- the values this process knows ----------------------------------------------------------


_Patterns = tuple[re.Pattern[str] | None, re.Pattern[str] | None, Mapping[str, str]]
_NONE: _Patterns = (None, None, {})


class _Known:
    """Secret values seen by this process (resolved or detected), each with its reference.

    Bounded: the oldest values are forgotten past ``capacity`` (a long-lived service
    resolves the same few secrets again and again; a value seen once long ago has left
    every run that used it). Readers get one immutable snapshot, rebuilt after a change.
    """

    def __init__(self, capacity: int = 4096) -> None:
        self._lock = threading.Lock()
        self._values: collections.OrderedDict[str, str] = collections.OrderedDict()
        self._capacity = capacity
        self._snapshot: _Patterns | None = _NONE

    def add(self, value: str, ref: str) -> None:
        with self._lock:
            if self._values.get(value) == ref:
                self._values.move_to_end(value)
                return
            self._values[value] = ref
            self._values.move_to_end(value)
            while len(self._values) > self._capacity:
                self._values.popitem(last=False)
            self._snapshot = None

    def patterns(self) -> _Patterns:
        """The value pattern, the JSON-text probe, and the value -> reference map."""
        snapshot = self._snapshot
        if snapshot is not None:
            return snapshot
        with self._lock:
            if self._snapshot is None:
                # Longest first, so a value that contains another is replaced whole.
                values = sorted(self._values, key=len, reverse=True)
                escaped = sorted(
                    {json.dumps(v, ensure_ascii=False)[1:-1] for v in values}, key=len, reverse=True
                )
                self._snapshot = (
                    re.compile("|".join(map(re.escape, values))),
                    re.compile("|".join(map(re.escape, escaped))),
                    dict(self._values),
                )
            return self._snapshot


_KNOWN = _Known()


def remember_secret(value: str, name: str) -> bool:
    """Scrub ``value`` wherever it appears from now on, as the reference of ``name``.

    False (and nothing remembered) for a value shorter than :data:`MIN_KNOWN_LENGTH`.
    """
    if not isinstance(value, str) or len(value) < MIN_KNOWN_LENGTH:
        return False
    _KNOWN.add(value, reference(name))
    return True


def _known_text(text: str) -> str:
    pattern, _, refs = _KNOWN.patterns()
    if pattern is None or len(text) < MIN_KNOWN_LENGTH:
        return text
    return pattern.sub(lambda m: refs[m.group(0)], text)


def _scrub_text(text: str, params: re.Pattern[str] = _SECRET_QUERY) -> str:
    text = _known_text(text)
    if len(text) < _SHORTEST_SECRET:
        return text
    text = _SECRET_TEXT.sub(REDACTED, text)
    # Every credential parameter has its '='; most text has none, so skip that pattern.
    return params.sub(rf"\1{REDACTED}", text) if "=" in text else text


# --- the two passes --------------------------------------------------------------------------


def redact(value: Any) -> Any:
    """A copy of a JSON-like value with secrets replaced: what an exported artefact holds.

    The value under a credential-named key is replaced whole by ``"[redacted]"`` (``None``
    is kept: it shows that no credential was set); strings anywhere have known secret
    values replaced by their references and bearer tokens, API keys, JWTs and
    ``key=...`` parameters (anywhere: an export is read, not run) by ``"[redacted]"``.
    Other values come back unchanged.
    """
    # Exact types first (a trace record is plain JSON): no abstract-class checks per value.
    kind = type(value)
    if kind is str:
        return _scrub_text(value, _SECRET_PARAM) if value else value
    if value is None or kind is int or kind is float or kind is bool:
        return value
    if kind is dict:
        out: dict[Any, Any] = {}
        for k, v in value.items():
            if v is None:
                out[k] = v
            elif isinstance(k, str) and is_secret_key(k):
                out[k] = REDACTED
            else:
                t = type(v)
                out[k] = v if t is int or t is float or t is bool else redact(v)
        return out
    if kind is list or kind is tuple:
        return [redact(v) for v in value]
    # Subclasses (a StrEnum member) and other mappings and sequences.
    if isinstance(value, str):
        return _scrub_text(value, _SECRET_PARAM) if value else value
    if isinstance(value, Mapping):
        return {
            k: (
                REDACTED if isinstance(k, str) and v is not None and is_secret_key(k) else redact(v)
            )
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [redact(v) for v in value]
    return value


def scrub(value: Any) -> Any:
    """A copy of a JSON-like value with secrets in its text replaced (keys' names are not
    judged): known values by their references, detected ones by ``"[redacted]"``; a
    ``key=...`` parameter only in a URL's query string (stored code must stay runnable)."""
    if isinstance(value, str):
        return _scrub_text(value) if value else value
    if isinstance(value, Mapping):
        return {(scrub(k) if isinstance(k, str) else k): scrub(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [scrub(v) for v in value]
    return value


def might_hold_secret(text: str) -> bool:
    """Whether JSON ``text`` may hold a secret :func:`scrub` would replace (a quick probe:
    False means surely not)."""
    lower = text.lower()
    # A plain loop, not ``any()`` over a generator: every store write probes its text.
    for literal in _LITERALS:
        if literal in lower:
            return True
    if "=" in lower:
        for literal in _PARAM_LITERALS:
            if literal in lower:
                return True
    _, probe, _ = _KNOWN.patterns()
    return probe is not None and probe.search(text) is not None


def scrub_document(plain: dict[str, Any]) -> bool:
    """Scrub a plain JSON document (fresh dicts and lists) in place; True if it changed."""
    changed = False

    def walk(value: Any) -> Any:
        nonlocal changed
        if isinstance(value, str):
            clean = _scrub_text(value) if value else value
            if clean != value:
                changed = True
            return clean
        if isinstance(value, dict):
            items = [(walk(k), walk(v)) for k, v in value.items()]
            value.clear()
            value.update(items)
            return value
        if isinstance(value, list):
            value[:] = [walk(v) for v in value]
            return value
        return value

    walk(plain)
    return changed
