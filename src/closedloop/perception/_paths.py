"""Dotted field paths ("forecast.0.temp") into parsed JSON, shared by the tool and the metrics."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel

from .._exceptions import ConfigurationError

__all__ = ["check_paths", "is_blank", "resolve"]


def resolve(data: Any, path: str) -> tuple[bool, Any]:
    """Follow ``path`` into ``data``; return ``(found, value)``.

    A key that literally contains dots wins over the dotted reading, so ``"a.b"`` finds
    ``{"a.b": 1}`` as well as ``{"a": {"b": 1}}``. Integer parts index sequences.
    """
    if isinstance(data, Mapping) and path in data:
        return True, data[path]
    current = data
    for part in path.split("."):
        if isinstance(current, Mapping):
            if part not in current:
                return False, None
            current = current[part]
        elif isinstance(current, Sequence) and not isinstance(current, str | bytes | bytearray):
            try:
                index = int(part)
            except ValueError:
                return False, None
            if not -len(current) <= index < len(current):
                return False, None
            current = current[index]
        elif isinstance(current, BaseModel) and part in type(current).model_fields:
            current = getattr(current, part)
        else:
            return False, None
    return True, current


def is_blank(value: Any) -> bool:
    """True for None, a whitespace-only string and an empty container."""
    if value is None:
        return True
    if isinstance(value, str):
        return not value.strip()
    if isinstance(value, Mapping | list | tuple | set | frozenset):
        return len(value) == 0
    return False


def check_paths(argument: str, paths: Sequence[str] | str) -> tuple[str, ...]:
    """Validate a list of field paths given as an argument."""
    if isinstance(paths, str):
        # A bare string would silently become one path per character.
        raise ConfigurationError(argument, paths, "must be a sequence of field paths, not a str")
    out: list[str] = []
    for path in paths:
        if not isinstance(path, str) or not path.strip():
            raise ConfigurationError(
                argument, paths, f"field path {path!r} must be a non-empty str"
            )
        out.append(path)
    return tuple(out)
