"""Recovering the JSON a model meant to write from the text it actually wrote.

The usual recipe extracts JSON with a greedy ``\\{.*\\}`` regex; that swallows everything
between the first ``{`` and the last ``}`` (two objects, braces in trailing prose) and
cannot see strings. This module scans instead: it tracks strings and escapes, matches
brackets on a stack, and tries candidates in order of appearance.

Rules, in order:

1. A candidate starts at ``{`` followed by ``"``, ``'`` or ``}``, or at ``[`` followed by
   something that can start a JSON value. Other brackets are prose ("see [note]").
2. The candidate ends where its bracket closes. A mismatched closer rejects it and the
   scan goes on after the mismatch; a candidate still open at the end of the text is
   truncated, and the scan stops there, so a fragment nested inside a cut-off answer
   is never mistaken for the answer.
3. A candidate is parsed strictly first. Only if that fails are the repairs applied
   (each one is listed in ``SanitizeResult.repairs``): trailing commas dropped, Python
   ``True``/``False``/``None`` read as JSON literals, single-quoted strings re-quoted,
   raw control characters inside strings escaped. ``NaN`` and ``Infinity`` are refused.
4. With a schema, the first candidate that validates wins; a parsed candidate that
   fails the schema is remembered, and returned with ``ok=False`` if nothing later does.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import jsonschema
import jsonschema.exceptions
import jsonschema.validators
from pydantic import BaseModel, ValidationError

from .._exceptions import ConfigurationError

__all__ = ["SanitizeResult", "sanitize_json"]

_CLOSER = {"{": "}", "[": "]"}
_OPENER_RE = re.compile(r"[{\[]")
_SPECIAL_RE = re.compile(r"[\"'{}\[\]]")
_STRING_END_RE = {'"': re.compile(r'[\\"]'), "'": re.compile(r"[\\']")}
_JSON_SPACE = " \t\r\n"
_LITERALS = ("true", "false", "null", "True", "False", "None")
_PYTHON_LITERALS = {"True": "true", "False": "false", "None": "null"}
_IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

REPAIR_TRAILING_COMMA = "removed trailing commas"
REPAIR_PYTHON_LITERALS = "read Python True/False/None as JSON literals"
REPAIR_SINGLE_QUOTES = "re-quoted single-quoted strings"
REPAIR_CONTROL_CHARS = "escaped raw control characters inside strings"


@dataclass(frozen=True, slots=True)
class SanitizeResult:
    """What ``sanitize_json`` found.

    ``ok`` is True when a JSON object or array was recovered (and passed the schema, if
    one was given). ``data`` is the parsed value; with ``ok=False`` it may still hold
    the first parsed candidate that failed the schema. ``errors`` says why it failed.
    ``repairs`` names every repair applied to the returned candidate; ``skipped`` counts
    earlier candidates that did not parse or validate; ``span`` is the candidate's
    ``(start, end)`` in the text; ``model`` is the validated instance for a pydantic schema.
    """

    ok: bool
    data: Any
    errors: tuple[str, ...] = ()
    repairs: tuple[str, ...] = ()
    skipped: int = 0
    span: tuple[int, int] | None = None
    model: BaseModel | None = None


_Validator = Callable[[Any], tuple[list[str], BaseModel | None]]


def _compile_schema(schema: Any) -> _Validator | None:
    if schema is None:
        return None
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        model_cls = schema

        def validate_model(data: Any) -> tuple[list[str], BaseModel | None]:
            try:
                return [], model_cls.model_validate(data)
            except ValidationError as exc:
                return [
                    f"$.{'.'.join(str(p) for p in e['loc'])}: {e['msg']}"
                    if e["loc"]
                    else f"$: {e['msg']}"
                    for e in exc.errors()
                ], None

        return validate_model
    if isinstance(schema, Mapping):
        schema_dict = dict(schema)
        validator_cls = jsonschema.validators.validator_for(schema_dict)
        try:
            validator_cls.check_schema(schema_dict)
        except jsonschema.exceptions.SchemaError as exc:
            raise ConfigurationError(
                "schema", schema, f"not a valid JSON schema: {exc.message}"
            ) from None
        validator = validator_cls(schema_dict)

        def validate_json(data: Any) -> tuple[list[str], BaseModel | None]:
            errors = sorted(validator.iter_errors(data), key=lambda e: list(map(str, e.path)))
            return [f"{e.json_path}: {e.message}" for e in errors], None

        return validate_json
    raise ConfigurationError(
        "schema", schema, "must be None, a pydantic model class or a JSON-schema dict"
    )


def _looks_like_start(text: str, i: int) -> bool:
    j = i + 1
    while j < len(text) and text[j] in _JSON_SPACE:
        j += 1
    if j == len(text):
        return True  # an opener at the very end: report it as truncated
    nxt = text[j]
    if text[i] == "{":
        return nxt in "\"'}"
    if nxt in "\"'{[]-" or "0" <= nxt <= "9":
        return True
    return any(text.startswith(lit, j) for lit in _LITERALS)


def _scan(text: str, start: int) -> tuple[str, int]:
    """Match the bracket at ``start``: ("closed", end) | ("mismatch", pos) | ("truncated", len)."""
    stack = [_CLOSER[text[start]]]
    i = start + 1
    while True:
        m = _SPECIAL_RE.search(text, i)
        if m is None:
            return "truncated", len(text)
        i = m.start()
        c = text[i]
        if c in "\"'":
            # Single quotes are string delimiters too: valid JSON never has one outside a
            # string, and drifted output uses them around strings that may hold brackets.
            end_re = _STRING_END_RE[c]
            i += 1
            while True:
                s = end_re.search(text, i)
                if s is None:
                    return "truncated", len(text)
                if text[s.start()] == "\\":
                    i = s.start() + 2
                    continue
                i = s.start() + 1
                break
            continue
        if c in "{[":
            stack.append(_CLOSER[c])
        elif c != stack[-1]:
            return "mismatch", i
        else:
            stack.pop()
            if not stack:
                return "closed", i + 1
        i += 1


def _candidates(text: str) -> Iterator[tuple[str, int, int]]:
    pos = 0
    while True:
        m = _OPENER_RE.search(text, pos)
        if m is None:
            return
        start = m.start()
        if not _looks_like_start(text, start):
            pos = start + 1
            continue
        kind, end = _scan(text, start)
        yield kind, start, end
        if kind == "truncated":
            return
        pos = end if kind == "closed" else end + 1


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-standard JSON constant {name}")


def _loads(text: str) -> Any:
    return json.loads(text, parse_constant=_reject_constant)


def _copy_string(src: str, i: int, out: list[str], used: set[str]) -> int:
    """Copy the string starting at ``src[i]`` as a double-quoted JSON string; return the end."""
    quote = src[i]
    if quote == "'":
        used.add(REPAIR_SINGLE_QUOTES)
    out.append('"')
    i += 1
    while i < len(src):
        c = src[i]
        if c == "\\" and i + 1 < len(src):
            nxt = src[i + 1]
            # \' is not a JSON escape; inside a re-quoted string it is just a quote.
            out.append("'" if nxt == "'" else c + nxt)
            i += 2
            continue
        if c == quote:
            out.append('"')
            return i + 1
        if c == '"':
            out.append('\\"')
        elif c < " ":
            used.add(REPAIR_CONTROL_CHARS)
            out.append(f"\\u{ord(c):04x}")
        else:
            out.append(c)
        i += 1
    return i


def _repair(candidate: str) -> tuple[str, tuple[str, ...]]:
    out: list[str] = []
    used: set[str] = set()
    i = 0
    n = len(candidate)
    while i < n:
        c = candidate[i]
        if c in "\"'":
            i = _copy_string(candidate, i, out, used)
            continue
        if c == ",":
            j = i + 1
            while j < n and candidate[j] in _JSON_SPACE:
                j += 1
            if j < n and candidate[j] in "}]":
                used.add(REPAIR_TRAILING_COMMA)
                i = j
                continue
        m = _IDENT_RE.match(candidate, i)
        if m is not None:
            word = m.group()
            if word in _PYTHON_LITERALS:
                used.add(REPAIR_PYTHON_LITERALS)
                word = _PYTHON_LITERALS[word]
            out.append(word)
            i = m.end()
            continue
        out.append(c)
        i += 1
    order = (REPAIR_TRAILING_COMMA, REPAIR_PYTHON_LITERALS, REPAIR_SINGLE_QUOTES)
    return "".join(out), tuple(r for r in (*order, REPAIR_CONTROL_CHARS) if r in used)


def _parse(candidate: str, offset: int, repair: bool) -> tuple[bool, Any, tuple[str, ...], str]:
    try:
        return True, _loads(candidate), (), ""
    except json.JSONDecodeError as exc:
        error = f"invalid JSON at offset {offset + exc.pos}: {exc.msg}"
    except RecursionError:
        return False, None, (), f"JSON at offset {offset} is nested too deeply"
    except ValueError as exc:
        error = f"JSON at offset {offset}: {exc}"
    if not repair:
        return False, None, (), error
    fixed, repairs = _repair(candidate)
    if not repairs:
        return False, None, (), error
    try:
        return True, _loads(fixed), repairs, ""
    except (ValueError, RecursionError):
        return False, None, (), f"{error} (repairs did not help: {'; '.join(repairs)})"


def sanitize_json(text: str, schema: Any = None, *, repair: bool = True) -> SanitizeResult:
    """Recover the first complete JSON object or array in ``text``.

    ``schema`` may be None, a pydantic model class or a JSON-schema dict; a schema
    that is neither, or an invalid JSON schema, raises ``ConfigurationError``. Any
    ``text`` never raises: failure is ``ok=False`` with ``errors``. Set ``repair=False``
    to accept only strictly valid JSON. See the module docstring for the exact rules.
    """
    validate = _compile_schema(schema)
    if not isinstance(text, str):
        raise ConfigurationError("text", type(text).__name__, "must be a str")
    errors: list[str] = []
    rejected: SanitizeResult | None = None
    skipped = 0
    for kind, start, end in _candidates(text):
        if kind == "truncated":
            errors.append(
                f"truncated: {text[start]!r} at offset {start} is never closed "
                f"(the text ends first)"
            )
            break
        if kind == "mismatch":
            errors.append(
                f"unbalanced: {text[end]!r} at offset {end} does not close "
                f"the {text[start]!r} at offset {start}"
            )
            skipped += 1
            continue
        ok, data, repairs, error = _parse(text[start:end], start, repair)
        if not ok:
            errors.append(error)
            skipped += 1
            continue
        if validate is None:
            return SanitizeResult(True, data, (), repairs, skipped, (start, end))
        try:
            problems, model = validate(data)
        except RecursionError:
            problems, model = [f"$: too deeply nested to validate (offset {start})"], None
        if not problems:
            return SanitizeResult(True, data, (), repairs, skipped, (start, end), model)
        errors.extend(f"schema (candidate at offset {start}): {p}" for p in problems)
        if rejected is None:
            rejected = SanitizeResult(False, data, (), repairs, skipped, (start, end))
        skipped += 1
    if not errors:
        errors.append("no JSON object or array found")
    if rejected is not None:
        return SanitizeResult(
            False, rejected.data, tuple(errors), rejected.repairs, skipped, rejected.span
        )
    return SanitizeResult(False, None, tuple(errors), (), skipped, None)
