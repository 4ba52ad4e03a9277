"""Retries a tool makes inside one call, reported to the step that made the call.

A tool may retry on its own (an MCP server's connection is reopened and a read-only call
asked again): the loop cannot see those attempts, yet the step's record must say the call
ran more than once. The loop opens a log around each call; a tool reports each retry to
it through a context variable, which tasks started inside the call inherit.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

__all__ = ["collect_tool_retries", "report_tool_retry"]

_LOG: ContextVar[list[dict[str, Any]] | None] = ContextVar("closedloop_tool_retries", default=None)


def report_tool_retry(entry: Mapping[str, Any]) -> None:
    """Add one retry to the calling step's log; outside a loop's call, nothing happens."""
    log = _LOG.get()
    if log is not None:
        log.append(dict(entry))


@contextmanager
def collect_tool_retries() -> Iterator[list[dict[str, Any]]]:
    """A log the tool calls made inside this block report their retries to."""
    log: list[dict[str, Any]] = []
    token = _LOG.set(log)
    try:
        yield log
    finally:
        _LOG.reset(token)
