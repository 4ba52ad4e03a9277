"""JSON answers: check a response schema, parse a reply strictly or leniently, validate it."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import jsonschema
from jsonschema.exceptions import SchemaError, best_match
from jsonschema.protocols import Validator

from .._exceptions import ConfigurationError

__all__ = ["check_schema", "extract_json", "parse_structured", "schema_text"]

_FENCE = re.compile(r"```[A-Za-z0-9_-]*\s*\n?(.*?)```", re.DOTALL)


def schema_text(schema: Mapping[str, Any]) -> str:
    """Canonical JSON text of a schema (a cache key, and what grammar compilers read)."""
    return json.dumps(schema, sort_keys=True, ensure_ascii=False)


@lru_cache(maxsize=256)
def _validator(text: str) -> Validator:
    schema = json.loads(text)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    validator: Validator = cls(schema)
    return validator


def check_schema(schema: Mapping[str, Any]) -> Validator:
    """Return a validator for ``schema``, or raise ``ConfigurationError`` if it is no schema."""
    if not isinstance(schema, Mapping):
        raise ConfigurationError("response_schema", schema, "must be a JSON Schema object")
    try:
        return _validator(schema_text(schema))
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(
            "response_schema", schema, f"not JSON-serialisable: {exc}"
        ) from None
    except SchemaError as exc:
        raise ConfigurationError(
            "response_schema", schema, f"not a valid JSON Schema: {exc.message}"
        ) from None


def extract_json(text: str) -> str:
    """The most plausible JSON document inside ``text``: a fenced block, else the first
    balanced object or array, else the stripped text itself."""
    stripped = text.strip()
    fence = _FENCE.search(stripped)
    if fence:
        stripped = fence.group(1).strip()
    decoder = json.JSONDecoder()
    for index, char in enumerate(stripped):
        if char in "{[":
            try:
                _value, end = decoder.raw_decode(stripped, index)
            except (ValueError, RecursionError):
                # Nesting deeper than the decoder's recursion limit is hostile input, not JSON.
                continue
            return stripped[index:end]
    return stripped


def parse_structured(
    text: str, schema: Mapping[str, Any], *, lenient: bool = False
) -> tuple[Any, str | None]:
    """``(value, None)`` when ``text`` is JSON matching ``schema``, else ``(None, reason)``.

    Strict mode accepts only a whole-text JSON document (surrounding whitespace aside), so
    prose or code fences around the JSON count as format drift. Lenient mode digs it out.
    """
    candidate = extract_json(text) if lenient else text.strip()
    try:
        value = json.loads(candidate)
    except ValueError as exc:
        return None, f"not valid JSON: {exc}"
    except RecursionError:
        return None, "not valid JSON: nested deeper than the parser allows"
    error = best_match(check_schema(schema).iter_errors(value))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "(root)"
        return None, f"does not match the schema at {where}: {error.message}"
    return value, None
