"""Where closedloop keeps its files: ``$CLOSEDLOOP_HOME`` (default ``~/.cache/closedloop``)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["closedloop_home", "default_state_path"]


def closedloop_home() -> Path:
    """The directory for closedloop's state and runs, read from the environment at each call.

    ``$CLOSEDLOOP_HOME`` when set and non-empty, else ``~/.cache/closedloop``. Not created here.
    """
    configured = os.environ.get("CLOSEDLOOP_HOME", "").strip()
    base = Path(configured) if configured else Path("~/.cache/closedloop")
    return base.expanduser()


def default_state_path() -> Path:
    """The embedded state store's default file, ``$CLOSEDLOOP_HOME/state.db``."""
    return closedloop_home() / "state.db"
