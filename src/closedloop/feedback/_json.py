"""JSON checks for stored state: validate with a path, encode, freeze and thaw.

Everything a store keeps goes through :func:`check_json` first, so a bad value is refused
before any write, with the exact place it sits (``data['x'][2]: object of type set``)
instead of a bare ``TypeError`` from deep inside ``json``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any, TypeAlias

from .._exceptions import StateSerializationError

__all__ = [
    "MAX_DEPTH",
    "CheckedDocument",
    "FrozenObject",
    "JSONValue",
    "check_json",
    "checked_document",
    "decode_document",
    "encode_document",
    "freeze",
    "freeze_mapping",
    "thaw",
]

JSONValue: TypeAlias = (
    bool | int | float | str | Sequence["JSONValue"] | Mapping[str, "JSONValue"] | None
)
"""A JSON value as read back from a store: arrays are tuples, objects read-only mappings."""

MAX_DEPTH = 200
"""Nesting deeper than this is refused: ``json`` and the freezer recurse once per level."""

_EMPTY: Mapping[str, JSONValue] = MappingProxyType({})


def _where(path: str, key: object) -> str:
    return f"{path}[{key!r}]"


def check_json(value: Any, path: str = "data") -> Any:
    """Return a plain deep copy of ``value`` made only of dict, list, str, int, float, bool, None.

    Subclasses (a ``StrEnum`` member, an ``IntEnum``) become their base type so the value
    reads back exactly as it was stored. Raises :class:`StateSerializationError` naming the
    path of the first offending part: non-string keys, NaN/infinity, sets, arbitrary
    objects, cycles, strings that are not valid Unicode, nesting past :data:`MAX_DEPTH`.
    """
    try:
        return _copy(value, 0, set())
    except _Refused:
        pass
    # Slow path, only for bad input: walk again, this time tracking where we are, so the
    # error names the exact path (building that path for every good value costs more than
    # the whole check).
    return _check(value, path, 0, set())


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class _Refused(Exception):
    """The fast copy met something it does not accept; the slow walk says what and where."""


def _copy(value: Any, depth: int, seen: set[int]) -> Any:
    # Exact types first: agent state is almost all plain str/int/dict/list.
    kind = type(value)
    if kind is str:
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise _Refused from None
        return value
    if value is None or kind is bool or kind is int:
        return value
    if kind is float:
        if value - value == 0.0:  # finite (inf - inf and nan - nan are nan)
            return value
        raise _Refused
    if depth >= MAX_DEPTH:
        raise _Refused
    if kind is dict:
        marker = id(value)
        if marker in seen:
            raise _Refused
        seen.add(marker)
        out: dict[str, Any] = {}
        for key, item in value.items():
            if type(key) is not str or not (key.isascii() or _utf8(key)):
                raise _Refused
            kind = type(item)
            if (
                (kind is str and item.isascii())
                or item is None
                or kind is int
                or kind is bool
                or (kind is float and item - item == 0.0)  # finite
            ):
                out[key] = item
            else:
                out[key] = _copy(item, depth + 1, seen)
        seen.discard(marker)
        return out
    if kind is list or kind is tuple:
        marker = id(value)
        if marker in seen:
            raise _Refused
        seen.add(marker)
        items = []
        for item in value:
            kind = type(item)
            if (
                (kind is str and item.isascii())
                or item is None
                or kind is int
                or (kind is float and item - item == 0.0)  # finite
            ):
                items.append(item)
            else:
                items.append(_copy(item, depth + 1, seen))
        seen.discard(marker)
        return items
    # Subclasses (StrEnum members), other mappings, anything else: the careful walk
    # converts what it can; what it refuses is walked again from the top for its path.
    try:
        return _check(value, "", depth, seen)
    except StateSerializationError:
        raise _Refused from None


def _check(value: Any, path: str, depth: int, seen: set[int]) -> Any:
    # Ordered by frequency in agent state: strings and numbers first.
    if value is None or value is True or value is False:
        return value
    if isinstance(value, str):
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise StateSerializationError(
                    f"{path}: string is not valid Unicode ({exc.reason} at index {exc.start})"
                ) from None
        return value if type(value) is str else str.__str__(value)
    if isinstance(value, int):
        return value if type(value) is int else int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise StateSerializationError(f"{path}: float {value!r} is not valid JSON")
        return value if type(value) is float else float(value)
    if depth >= MAX_DEPTH:
        raise StateSerializationError(f"{path}: nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, Mapping):
        marker = id(value)
        if marker in seen:
            raise StateSerializationError(f"{path}: circular reference")
        seen.add(marker)
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise StateSerializationError(
                    f"{path}: key {key!r} of type {type(key).__name__} is not a string"
                )
            key = key if type(key) is str else str.__str__(key)
            if not (key.isascii() or _utf8(key)):
                raise StateSerializationError(f"{path}: key {key!r} is not valid Unicode")
            out[key] = _check(item, _where(path, key), depth + 1, seen)
        seen.discard(marker)
        return out
    if isinstance(value, list | tuple):
        marker = id(value)
        if marker in seen:
            raise StateSerializationError(f"{path}: circular reference")
        seen.add(marker)
        items = [_check(item, _where(path, i), depth + 1, seen) for i, item in enumerate(value)]
        seen.discard(marker)
        return items
    raise StateSerializationError(
        f"{path}: object of type {type(value).__name__} is not JSON serialisable"
    )


_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))
"""Built once: ``json.dumps`` with options builds a new encoder for every call."""


def encode_document(plain: Any) -> str:
    """Compact JSON text of a value already passed through :func:`check_json`."""
    return _ENCODER.encode(plain)


def decode_document(text: str) -> Any:
    """Inverse of :func:`encode_document`."""
    return json.loads(text)


class CheckedDocument(Mapping[str, Any]):
    """A JSON object already checked and encoded, which a store takes as it is.

    A loop that saves its whole state every step would otherwise pay for the state twice
    more per save: the checking copy and the encoding. The store still applies its size
    limit, and owns ``plain`` from then on (the caller must not change it).
    """

    __slots__ = ("plain", "text")

    def __init__(self, plain: dict[str, Any], text: str) -> None:
        self.plain = plain
        self.text = text

    def __getitem__(self, key: str) -> Any:
        return self.plain[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.plain)

    def __len__(self) -> int:
        return len(self.plain)


def checked_document(plain: dict[str, Any], path: str = "data") -> CheckedDocument:
    """Check and encode a JSON object made of fresh dicts and lists with string keys (what
    ``BaseModel.model_dump(mode="json")`` returns), without copying it when it is fine.

    The same value is accepted and refused, with the same error, as by :func:`check_json`:
    the encoder refuses what is not JSON (NaN, infinity, other types), the text shows
    whether every string is valid Unicode, and the number of brackets bounds the nesting.
    Whatever these quick checks cannot clear goes through :func:`check_json` itself.
    """
    try:
        text = encode_document(plain)
    except (TypeError, ValueError, RecursionError):
        text = None
    if text is None or not (text.isascii() or _utf8(text)):
        plain = check_json(plain, path)  # raises, naming the place
        text = encode_document(plain)
    # The number of brackets bounds the depth (and costs nothing); past it, count.
    elif text.count("{") + text.count("[") > MAX_DEPTH and not _within_depth(plain):
        check_json(plain, path)  # raises, naming the place
    return CheckedDocument(plain, text)


def _within_depth(value: Any) -> bool:
    """Whether no dict or list of ``value`` sits :data:`MAX_DEPTH` levels deep."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth >= MAX_DEPTH:
            return False
        for child in item.values() if type(item) is dict else item:
            kind = type(child)
            if kind is dict or kind is list:
                stack.append((child, depth + 1))
    return True


class FrozenObject(Mapping[str, JSONValue]):
    """A read-only view of a checked JSON object whose members are frozen on first read.

    A store freezes every document it writes, and most are never read back in the same
    process (the loop keeps its own copy): freezing lazily makes the write cost nothing and
    the read cost what an eager freeze would have. It owns the dict it is given.
    """

    __slots__ = ("_frozen", "_plain")

    def __init__(self, plain: dict[str, Any]) -> None:
        self._plain = plain
        self._frozen: dict[str, JSONValue] = {}

    def __getitem__(self, key: str) -> JSONValue:
        try:
            return self._frozen[key]
        except KeyError:
            value = freeze(self._plain[key])
            self._frozen[key] = value
            return value

    def __iter__(self) -> Iterator[str]:
        return iter(self._plain)

    def __len__(self) -> int:
        return len(self._plain)

    def __contains__(self, key: object) -> bool:
        return key in self._plain

    def __repr__(self) -> str:
        return f"FrozenObject({self._plain!r})"


def freeze(plain: Any) -> JSONValue:
    """A read-only deep view of checked JSON: lists become tuples, objects read-only mappings.

    The view takes ``plain`` over (nested objects are frozen when first read): the caller
    must not change it afterwards.
    """
    if isinstance(plain, dict):
        if not plain:
            return _EMPTY
        return FrozenObject(plain)
    if isinstance(plain, list):
        return tuple(freeze(v) for v in plain)
    return plain  # type: ignore[no-any-return]


def freeze_mapping(plain: Mapping[str, Any]) -> Mapping[str, JSONValue]:
    """:func:`freeze` for a top-level object, typed as a mapping."""
    if not plain:
        return _EMPTY
    return FrozenObject(plain if type(plain) is dict else dict(plain))


def _plain_copy(value: Any) -> Any:
    kind = type(value)
    if kind is dict:
        return {k: _plain_copy(v) for k, v in value.items()}
    if kind is list:
        return [_plain_copy(v) for v in value]
    return value


def thaw(value: Any) -> Any:
    """A mutable deep copy (dicts and lists) of a frozen or plain JSON value."""
    if type(value) is FrozenObject:
        # Straight from the checked dict underneath: no freezing just to copy it back.
        return _plain_copy(value._plain)
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [thaw(v) for v in value]
    return value
