"""Where closedloop keeps its files: ``$CLOSEDLOOP_HOME`` (default ``~/.cache/closedloop``)."""

from __future__ import annotations

from pathlib import Path

from .._home import closedloop_home

__all__ = [
    "default_state_path",
]


def default_state_path() -> Path:
    """The embedded state store's default file, ``$CLOSEDLOOP_HOME/state.db``."""
    return closedloop_home() / "state.db"
