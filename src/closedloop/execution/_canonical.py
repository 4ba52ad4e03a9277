"""Canonical JSON for arguments, so one logical call always gets one idempotency key.

Two calls that differ only in dict order, in ``100`` versus ``100.0``, in set order or in a
volatile field (a timestamp, a request id) are the same effect and must share a key;
anything else must not. Hash randomisation makes set order differ between processes, so
sets are sorted by their members' canonical text.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from typing import Any, TypeAlias

from pydantic import BaseModel
from pydantic_core import PydanticSerializationError, to_jsonable_python

from .._exceptions import ConfigurationError

__all__ = [
    "DEFAULT_VOLATILE_FIELDS",
    "JSON",
    "canonical_json",
    "effect_key",
    "normalise",
]

JSON: TypeAlias = "bool | int | float | str | list[JSON] | dict[str, JSON] | None"

# Fields that change on every call of the same logical effect.
DEFAULT_VOLATILE_FIELDS: frozenset[str] = frozenset(
    {"request_id", "trace_id", "span_id", "timestamp", "sent_at"}
)
"""Argument fields left out of an effect's key: they change on every call of the same
logical effect."""

# Beyond 2**53 floats no longer name distinct integers, so leave such floats alone.
_EXACT_FLOAT_INT = 2.0**53


def normalise(
    value: Any,
    volatile: Iterable[str] = (),
    *,
    coerce_integral: bool = True,
    path: str = "args",
) -> JSON:
    """Return ``value`` as plain JSON data with volatile keys dropped at every depth.

    ``coerce_integral`` turns ``100.0`` into ``100`` (for keys; stored arguments keep their
    floats). Raises :class:`ConfigurationError` naming the path of a value JSON cannot hold.
    """
    return _normalise(value, frozenset(volatile), coerce_integral, path)


def _normalise(value: Any, volatile: frozenset[str], coerce: bool, path: str) -> JSON:
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, enum.Enum):
        return _normalise(value.value, volatile, coerce, path)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ConfigurationError(path, value, "NaN and infinity cannot be stored as JSON")
        if coerce and value.is_integer() and abs(value) < _EXACT_FLOAT_INT:
            return int(value)
        return value
    if isinstance(value, Mapping):
        out: dict[str, JSON] = {}
        for key, item in value.items():
            if isinstance(key, enum.Enum):
                key = key.value
            if not isinstance(key, str):
                raise ConfigurationError(f"{path}.{key!r}", key, "mapping keys must be strings")
            if key in volatile:
                continue
            out[key] = _normalise(item, volatile, coerce, f"{path}.{key}")
        return dict(sorted(out.items()))
    if isinstance(value, list | tuple):
        return [_normalise(item, volatile, coerce, f"{path}[{i}]") for i, item in enumerate(value)]
    if isinstance(value, set | frozenset):
        items = [_normalise(item, volatile, coerce, f"{path}{{}}") for item in value]
        return sorted(items, key=canonical_json)
    if isinstance(value, BaseModel):
        return _normalise(value.model_dump(mode="json"), volatile, coerce, path)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _normalise(dataclasses.asdict(value), volatile, coerce, path)
    try:
        plain = to_jsonable_python(value)
    except PydanticSerializationError:
        raise ConfigurationError(
            path, value, f"a {type(value).__name__} cannot be stored as JSON"
        ) from None
    return _normalise(plain, volatile, coerce, path)


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
"""Built once: ``json.dumps`` with options builds a new encoder for every call."""


def canonical_json(value: JSON) -> str:
    """Compact JSON with sorted keys: equal data gives equal text."""
    return _CANONICAL.encode(value)


def effect_key(
    task_id: str,
    step: int,
    action: str,
    args: Mapping[str, Any],
    volatile: Iterable[str] = DEFAULT_VOLATILE_FIELDS,
) -> str:
    """The idempotency key ``task/step/action/digest`` of one effect.

    The digest is the SHA-256 of the canonical arguments (volatile fields stripped), so the
    same call retried after a crash maps to the same ledger entry.
    """
    if not isinstance(task_id, str) or not task_id or "/" in task_id:
        raise ConfigurationError("task_id", task_id, "must be a non-empty string without '/'")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ConfigurationError("step", step, "must be an integer >= 0")
    if not isinstance(action, str) or not action or "/" in action:
        raise ConfigurationError("action", action, "must be a non-empty string without '/'")
    if not isinstance(args, Mapping):
        raise ConfigurationError("args", args, "must be a mapping of argument names to values")
    text = canonical_json(normalise(args, volatile))
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]
    return f"{task_id}/{step}/{action}/{digest}"
