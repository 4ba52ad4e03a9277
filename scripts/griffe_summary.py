"""A Griffe extension: each docstring's first sentence on its own first line.

The API reference's summary tables show a docstring's first *line* (mkdocstrings-python),
so a first sentence wrapped at the line width would be cut mid-sentence. This extension,
loaded by the site's mkdocstrings settings, joins the wrapped lines of the first sentence
onto the first line and starts the rest of the paragraph on the next. Markdown renders a
paragraph's line breaks as spaces, so the full description reads exactly as before.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

__all__ = ["SentenceSummary", "first_sentence_first"]

# A sentence ends at ., ? or ! (optionally followed by closing quotes, brackets or code
# ticks) before whitespace or the end; the abbreviations below do not end one.
_END = re.compile(r"[.?!][)\]\"'`*]*(?=\s|$)")
_ABBREVIATIONS = ("e.g.", "i.e.", "etc.", "vs.", "cf.", "al.")
# A paragraph that opens with one of these is a list, a quote, a table or code: left alone.
_NOT_PROSE = re.compile(r"^\s*(?:[-*+>|]|\d+[.)]\s|```|>>>)")


def _sentence_end(text: str) -> int | None:
    for match in _END.finditer(text):
        before = text[: match.start() + 1]
        if not before.endswith(_ABBREVIATIONS):
            return match.end()
    return None


def first_sentence_first(value: str) -> str:
    """The docstring with its first sentence joined onto its first line.

    Only the first paragraph changes; a first paragraph with no sentence end is joined
    whole, so its summary shows everything it says.
    """
    lines = value.split("\n")
    if not lines or _NOT_PROSE.match(lines[0]):
        return value
    size = next((i for i, line in enumerate(lines) if not line.strip()), len(lines))
    if size < 2:
        return value
    paragraph = " ".join(line.strip() for line in lines[:size])
    end = _sentence_end(paragraph)
    sentence, rest = (paragraph, "") if end is None else (paragraph[:end], paragraph[end:].strip())
    if _NOT_PROSE.match(rest):  # the rest on a line of its own would become a list item
        sentence, rest = paragraph, ""
    head = [sentence, rest] if rest else [sentence]
    return "\n".join(head + lines[size:])


class SentenceSummary(griffe.Extension):
    """Rewrites each loaded object's docstring so its summary is a whole sentence."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        """Called by Griffe once an object is loaded."""
        if obj.docstring is not None:
            obj.docstring.value = first_sentence_first(obj.docstring.value)
