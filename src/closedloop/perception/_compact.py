"""Bounding oversized values without silently losing track of what was cut.

An observation's value goes into the model's context and into traces; a 40 MB tool
answer must not. ``compact`` keeps a prefix of the structure that fits a character
budget, leaves an in-band marker where something was cut (so a reader of the value
alone still sees the cut) and returns a note naming every cut.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._validation import require_int_at_least

__all__ = ["MIN_COMPACT_CHARS", "Compacted", "compact", "json_size"]

MIN_COMPACT_CHARS = 64
"""Below this budget the cut markers themselves would not fit."""

_MAX_NOTES = 8


@dataclass(frozen=True, slots=True)
class Compacted:
    """A value cut to fit a budget. ``note`` is None when nothing was cut."""

    value: Any
    note: str | None
    original_chars: int
    kept_chars: int

    @property
    def cut(self) -> bool:
        return self.note is not None


_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=repr)
"""Built once: ``json.dumps`` with options builds a new encoder for every call."""


def _dump(value: Any) -> str:
    try:
        return _COMPACT.encode(value)
    except (TypeError, ValueError, RecursionError):
        # Circular or non-string-keyed structures: size them by their repr instead.
        return json.dumps(repr(value), ensure_ascii=False)


def json_size(value: Any) -> int:
    """Length of the compact JSON text of ``value`` (its repr for non-JSON values)."""
    return len(_dump(value))


def _string_marker(cut: int) -> str:
    return f"…[+{cut} chars]"


def _cut_str(text: str, budget: int, path: str, notes: list[str]) -> str:
    # Escapes make the JSON size of a prefix non-linear in its length: search for the
    # longest prefix whose dumped form (with its marker) fits.
    lo, hi = 0, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if json_size(text[:mid] + _string_marker(len(text) - mid)) <= budget:
            lo = mid
        else:
            hi = mid - 1
    notes.append(f"{path}: string cut from {len(text)} to {lo} chars")
    return text[:lo] + _string_marker(len(text) - lo)


def _keep_prefix(
    items: Sequence[Any],
    budget: int,
    notes: list[str],
    *,
    path: Callable[[int], str],
    key_size: Callable[[int], int],
    marker_size: Callable[[int], int],
) -> list[Any]:
    """The longest prefix of ``items`` that fits, each shrunk into the room left for it.

    Item ``index`` costs ``key_size(index)`` besides its value (an object's ``"key":``),
    and room stays for ``marker_size(index)``, the marker naming what is dropped from there.
    """
    kept: list[Any] = []
    used = 2  # the brackets
    for index, item in enumerate(items):
        key = key_size(index)
        room = budget - used - (1 if kept else 0) - key - marker_size(index)
        if room <= 0:
            break
        child_notes: list[str] = []
        child = _shrink(item, room, path(index), child_notes)
        size = json_size(child)
        if size > room:
            break
        kept.append(child)
        notes.extend(child_notes)
        used += key + size + (1 if len(kept) > 1 else 0)
    return kept


def _cut_sequence(items: list[Any], budget: int, path: str, notes: list[str]) -> list[Any]:
    total = len(items)
    kept = _keep_prefix(
        items,
        budget,
        notes,
        path=lambda index: f"{path}[{index}]",
        key_size=lambda index: 0,
        marker_size=lambda index: json_size(f"…[+{total - index} more items]") + 1,
    )
    if len(kept) < total:
        kept.append(f"…[+{total - len(kept)} more items]")
        notes.append(f"{path}: kept {len(kept) - 1} of {total} items")
    return kept


def _dropped_marker(entries: list[tuple[str, Any]], start: int) -> str:
    names = ", ".join(key for key, _ in entries[start : start + _MAX_NOTES])
    count = len(entries) - start
    more = f", … ({count - _MAX_NOTES} more)" if count > _MAX_NOTES else ""
    return f"+{count} more keys: {names}{more}"


def _fair_shares(sizes: list[int], available: int) -> list[int]:
    # Water-filling: small values keep their whole size, large ones split what is left.
    shares = [0] * len(sizes)
    remaining = available
    order = sorted(range(len(sizes)), key=sizes.__getitem__)
    for rank, index in enumerate(order):
        share = min(sizes[index], remaining // (len(order) - rank))
        shares[index] = share
        remaining -= share
    return shares


def _cut_mapping_fairly(
    entries: list[tuple[str, Any]], budget: int, path: str, notes: list[str]
) -> dict[str, Any] | None:
    """Keep every key and cut the large values; None when the keys alone do not fit."""
    overhead = 2 + sum(json_size(key) + 2 for key, _ in entries)
    sizes = [json_size(item) for _, item in entries]
    shares = _fair_shares(sizes, budget - overhead)
    kept: dict[str, Any] = {}
    child_notes: list[str] = []
    for (key, item), share in zip(entries, shares, strict=True):
        child = _shrink(item, share, f"{path}.{key}", child_notes) if share > 0 else None
        if child is None or json_size(child) > share:
            return None
        kept[key] = child
    notes.extend(child_notes)
    return kept


def _cut_mapping(
    mapping: Mapping[Any, Any], budget: int, path: str, notes: list[str]
) -> dict[str, Any]:
    entries = [(k if isinstance(k, str) else str(k), v) for k, v in mapping.items()]
    fair = _cut_mapping_fairly(entries, budget, path, notes)
    if fair is not None:
        return fair
    # Too many keys for the budget: keep a prefix of them and name the rest.
    values = _keep_prefix(
        [item for _, item in entries],
        budget,
        notes,
        path=lambda index: f"{path}.{entries[index][0]}",
        key_size=lambda index: json_size(entries[index][0]) + 1,
        marker_size=lambda index: json_size({"…": _dropped_marker(entries, index)}),
    )
    kept = {key: value for (key, _), value in zip(entries, values, strict=False)}
    if len(kept) < len(entries):
        marker = _dropped_marker(entries, len(kept))
        kept["…"] = marker
        notes.append(f"{path}: dropped {marker.removeprefix('+')}")
    return kept


def _shrink(value: Any, budget: int, path: str, notes: list[str]) -> Any:
    if json_size(value) <= budget:
        return value
    if isinstance(value, str):
        return _cut_str(value, budget, path, notes)
    if isinstance(value, Mapping):
        return _cut_mapping(value, budget, path, notes)
    if isinstance(value, list | tuple):
        return _cut_sequence(list(value), budget, path, notes)
    # A huge number or a foreign object: keep a readable prefix of its text.
    return _cut_str(_dump(value), budget, path, notes)


def compact(value: Any, max_chars: int) -> Compacted:
    """Cut ``value`` so its compact JSON text has at most ``max_chars`` characters.

    Strings keep a prefix plus ``…[+N chars]``; lists keep their first items plus a
    ``"…[+N more items]"`` entry; mappings keep their first keys plus a ``"…"`` entry
    naming the dropped keys. ``note`` lists every cut by path ("$.flights: kept 3 of
    120 items"). A value that already fits is returned as is, with ``note=None``.
    """
    require_int_at_least("max_chars", max_chars, MIN_COMPACT_CHARS)
    original = json_size(value)
    if original <= max_chars:
        return Compacted(value=value, note=None, original_chars=original, kept_chars=original)
    notes: list[str] = []
    out = _shrink(value, max_chars, "$", notes)
    if json_size(out) > max_chars:  # structural overhead beat the estimates; cut the text
        notes = []
        out = _cut_str(_dump(value), max_chars, "$", notes)
    kept = json_size(out)
    shown = "; ".join(notes[:_MAX_NOTES])
    if len(notes) > _MAX_NOTES:
        shown += f"; and {len(notes) - _MAX_NOTES} more cuts"
    note = f"compacted from {original} to {kept} JSON chars: {shown}"
    return Compacted(value=out, note=note, original_chars=original, kept_chars=kept)
