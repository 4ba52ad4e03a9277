"""Repeated actions: the same call in different clothes is still the same call.

A model stuck in a loop often varies only what does not matter: a fresh timestamp, a new
request id, a nonce. So compare *normalised* arguments, or every call looks new.
Volatile keys are dropped and values that look like timestamps or random ids are replaced
by a placeholder before the call's signature is taken.

A repeat is refused (it is not run again). With ``ControlConfig.end_on_repeat`` a repeat
of the call that last ran, when that call succeeded, instead closes the run with that
call's result (:func:`repeated_success`): a model that proposes the action it has just
seen succeed has nothing left to do, and asking it again only buys a final answer that
restates the observation it already has.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..execution import DEFAULT_VOLATILE_FIELDS, canonical_json

__all__ = [
    "VOLATILE_KEYS",
    "action_signature",
    "count_repeats",
    "looks_volatile",
    "normalise_arguments",
    "repeated_success",
]

VOLATILE_KEYS: frozenset[str] = frozenset(
    {
        *DEFAULT_VOLATILE_FIELDS,
        "ts",
        "time",
        "now",
        "nonce",
        "uuid",
        "request_time",
        "requested_at",
        "created_at",
        "updated_at",
        "idempotency_key",
        "correlation_id",
        "cache_buster",
        "_",
    }
)
"""Argument names whose values change on every call of the same logical action."""
_VOLATILE_LOWER = frozenset(k.lower() for k in VOLATILE_KEYS)  # as they are compared

_PLACEHOLDER = "<volatile>"
_UUID = re.compile(
    r"^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$"
)
_HEX_ID = re.compile(r"^(?=.*\d)(?=.*[a-fA-F])[0-9a-fA-F]{24,}$")
_ISO_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?$")
# Epoch seconds between 2001-09-09 and 2286 (10 digits), or the same in milliseconds.
_EPOCH_S = (1_000_000_000, 9_999_999_999)
_EPOCH_MS = (1_000_000_000_000, 9_999_999_999_999)


def looks_volatile(value: Any) -> bool:
    """True for values that are almost surely a clock reading or a random id.

    A date alone (``2024-05-01``) is a real argument and stays; a date with a time of day,
    a UUID, a long hex id or an epoch time in seconds or milliseconds is volatile.
    """
    if isinstance(value, bool):
        return False
    if isinstance(value, int | float):
        v = abs(value)
        return _EPOCH_S[0] <= v <= _EPOCH_S[1] or _EPOCH_MS[0] <= v <= _EPOCH_MS[1]
    if isinstance(value, str):
        text = value.strip()
        return bool(_UUID.match(text) or _HEX_ID.match(text) or _ISO_TIME.match(text))
    return False


def normalise_arguments(value: Any, volatile_keys: Iterable[str] = VOLATILE_KEYS) -> Any:
    """``value`` with volatile keys dropped and volatile-looking values replaced, recursively."""
    if volatile_keys is VOLATILE_KEYS:  # every step's signature: lowered once, above
        return _normalise(value, _VOLATILE_LOWER)
    return _normalise(value, frozenset(k.lower() for k in volatile_keys))


def _normalise(value: Any, keys: frozenset[str]) -> Any:
    if isinstance(value, Mapping):
        return {
            str(k): _normalise(v, keys)
            for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))
            if str(k).lower() not in keys
        }
    if isinstance(value, list | tuple):
        return [_normalise(v, keys) for v in value]
    if looks_volatile(value):
        return _PLACEHOLDER
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        return " ".join(value.split()).casefold()
    return value


def action_signature(
    tool: str, arguments: Mapping[str, Any], volatile_keys: Iterable[str] = VOLATILE_KEYS
) -> str:
    """The canonical text two calls share exactly when they are the same logical action."""
    body = normalise_arguments(dict(arguments), volatile_keys)
    try:
        return f"{tool}:{canonical_json(body)}"
    except (TypeError, ValueError):
        return f"{tool}:{body!r}"


def count_repeats(signature: str, history: Sequence[str], window: int) -> int:
    """How often ``signature`` already occurs in the last ``window`` signatures.

    Not only consecutive repeats count: A, B, A, B is a loop too.
    """
    recent = history[-window:] if window > 0 else history
    return sum(1 for s in recent if s == signature)


def repeated_success(signature: str, entries: Sequence[Any]) -> Mapping[str, Any] | None:
    """The compacted observation of the call that last ran when it is the call of
    ``signature`` and it succeeded (status ``ok``), else None.

    ``entries`` are the task state's observation entries (``tool``, ``arguments``,
    ``observation``), oldest first. Only the latest counts: a call proposed again after
    another call ran (A, B, A) is a loop, which the repeat guard keeps refusing.
    """
    if not entries:
        return None
    last = entries[-1]
    if last.observation.get("status") != "ok":
        return None
    if action_signature(last.tool, last.arguments) != signature:
        return None
    observation: Mapping[str, Any] = last.observation
    return observation
