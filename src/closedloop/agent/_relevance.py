"""Context reduction: the share of the tools a lost model is shown, the most relevant first.

When a step's error says the model is lost, fewer choices help a weak model more than a
longer prompt: the retrieval of tools before their use (Patil et al. 2023, Gorilla; Qin et
al. 2023, ToolLLM's API retriever), here by plain lexical overlap with no learned model. A tool's relevance
is how many of the task's content words appear in its name, description, parameter names,
parameter descriptions and enum values; tools the run has already called stay shown, since
a model mid-task needs the tool it is using.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ._tools import Tool

__all__ = ["relevant_tools", "shown_count"]

_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "can",
        "do",
        "for",
        "from",
        "get",
        "give",
        "has",
        "have",
        "how",
        "i",
        "in",
        "is",
        "it",
        "me",
        "my",
        "of",
        "on",
        "or",
        "please",
        "the",
        "this",
        "to",
        "was",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "will",
        "with",
        "you",
        "your",
    ]
)


def _words(text: str) -> set[str]:
    # snake_case and camelCase names split into their words, as a reader sees them.
    spaced = re.sub(r"([a-z])([A-Z])", r"\1 \2", text).replace("_", " ").lower()
    return {w for w in _WORD.findall(spaced) if w not in _STOP and len(w) > 1}


def _schema_text(schema: Any) -> Iterable[str]:
    if isinstance(schema, Mapping):
        for key, value in schema.items():
            if key == "properties" and isinstance(value, Mapping):
                for name, sub in value.items():
                    yield str(name)
                    yield from _schema_text(sub)
            elif key in ("description", "title") and isinstance(value, str):
                yield value
            elif key == "enum" and isinstance(value, list):
                yield from (str(v) for v in value)
            elif isinstance(value, Mapping | list):
                yield from _schema_text(value)
    elif isinstance(schema, list):
        for item in schema:
            yield from _schema_text(item)


def _tool_words(tool: Tool) -> set[str]:
    return _words(" ".join([tool.name, tool.description, *_schema_text(tool.parameters)]))


def shown_count(total: int, share: float) -> int:
    """How many of ``total`` tools a ``share`` of the context shows (at least one)."""
    if total <= 0:
        return 0
    return max(1, min(total, math.ceil(share * total)))


def relevant_tools(
    tools: Sequence[Tool], share: float, task: str, used: Iterable[str] = ()
) -> list[Tool]:
    """The ``share`` of ``tools`` most relevant to ``task``, in their given order; the
    ones named in ``used`` first of all. With ``share >= 1`` every tool."""
    keep = shown_count(len(tools), share)
    if keep >= len(tools):
        return list(tools)
    wanted = _words(task)
    called = set(used)

    def score(item: tuple[int, Tool]) -> tuple[int, float, int]:
        index, tool = item
        words = _tool_words(tool)
        overlap = len(wanted & words) / math.sqrt(len(words)) if words else 0.0
        return (0 if tool.name in called else 1, -overlap, index)

    chosen = {index for index, _ in sorted(enumerate(tools), key=score)[:keep]}
    return [tool for index, tool in enumerate(tools) if index in chosen]
