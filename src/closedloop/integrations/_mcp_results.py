"""What an MCP tool's answer means to the loop, and what calling the tool does to the world.

An answer (a ``CallToolResult``) becomes an :class:`~closedloop.perception.Observation`:

* ``isError`` (the tool ran and says it failed): status ``error``, confidence 0, the
  tool's text as the error, so the model reads why;
* ``structuredContent``: the value, status ``ok`` at confidence 1; an empty one (``[]``,
  ``{}``, ``""``, ``null``) is ``empty``: "no match found", never "no constraint". SDK
  servers wrap a list or a scalar as ``{"result": ...}``; that wrapper is taken off;
* text only: the text (parsed when it is a JSON object or list), blank text is ``empty``;
* nothing the loop can read (images, audio, binary resources only): ``partial`` at 0.5.

The effect class of a tool is the user's declaration if there is one; otherwise read-only
(``recomputable``) only when the server's annotations say ``readOnlyHint: true``, and the
declared default (``irreversible``, so it goes through the effect ledger) for everything
else. The other hints (``idempotentHint``, ``destructiveHint``) come from a server that may
not be trusted, and a wrong "safe to repeat" repeats a payment; so they never make a tool
cheaper than the default, only a user's declaration does.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..execution import EffectClass
from ..perception import Observation
from ..perception._paths import is_blank

__all__ = ["effect_of", "result_observation", "text_of"]

_MAX_CHARS = 100_000


def effect_of(
    name: str, annotations: Any, declared: Mapping[str, EffectClass], default: EffectClass
) -> EffectClass:
    """The effect class of MCP tool ``name`` (see the module docstring)."""
    if name in declared:
        return declared[name]
    if annotations is not None and getattr(annotations, "read_only_hint", None) is True:
        return EffectClass.RECOMPUTABLE
    return default


def text_of(content: Any) -> str:
    """The text blocks of a result's content, joined by newlines."""
    parts = [
        block.text
        for block in content or ()
        if getattr(block, "type", None) == "text" and isinstance(block.text, str)
    ]
    return "\n".join(parts)


def _unwrapped(structured: Any, output_schema: Mapping[str, Any] | None) -> Any:
    if not isinstance(structured, dict) or set(structured) != {"result"}:
        return structured
    props = (output_schema or {}).get("properties")
    if isinstance(props, Mapping) and set(props) == {"result"}:
        return structured["result"]
    return structured


def _json_or_text(text: str) -> Any:
    stripped = text.strip()
    if stripped[:1] in ("{", "["):
        try:
            return json.loads(stripped)
        except ValueError:
            return text
    return text


def _raw(result: Any) -> Any:
    try:
        return result.model_dump(mode="json", by_alias=True, exclude_none=True)
    except (AttributeError, TypeError, ValueError):
        return repr(result)


def result_observation(
    result: Any,
    *,
    source: str,
    output_schema: Mapping[str, Any] | None,
    timestamp: float,
    latency_s: float,
) -> Observation:
    """A ``CallToolResult`` as an observation (see the module docstring)."""
    raw = _raw(result)
    text = text_of(getattr(result, "content", None))
    common: dict[str, Any] = {"source": source, "timestamp": timestamp, "raw": raw}
    if getattr(result, "is_error", False):
        why = text.strip() or "the tool reported an error and said nothing more"
        return Observation.failed(
            why,
            meaning=f"{source} ran and reported an error: {why}",
            latency_s=latency_s,
            **common,
        ).compacted(_MAX_CHARS)
    structured = getattr(result, "structured_content", None)
    if structured is not None:
        value = _unwrapped(structured, output_schema)
    elif text.strip():
        value = _json_or_text(text)
    elif other := [b for b in result.content or () if getattr(b, "type", None) != "text"]:
        kinds = sorted({str(getattr(b, "type", "unknown")) for b in other})
        return Observation.partial(
            [{"type": kind} for kind in kinds],
            confidence=0.5,
            meaning=(
                f"{source} answered with content the loop cannot read ({', '.join(kinds)}); "
                "no text or structured result"
            ),
            latency_s=latency_s,
            **common,
        ).compacted(_MAX_CHARS)
    else:
        value = None
    if is_blank(value):
        return Observation.empty(
            value=[] if value is None else value, latency_s=latency_s, **common
        ).compacted(_MAX_CHARS)
    return Observation.ok(value, latency_s=latency_s, **common).compacted(_MAX_CHARS)
