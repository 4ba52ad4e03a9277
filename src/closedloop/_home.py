"""Where closedloop keeps its files: ``$CLOSEDLOOP_HOME`` (default ``~/.cache/closedloop``).

One definition for every part (state store, models, runs, traces) so they never disagree.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["closedloop_home"]


def closedloop_home() -> Path:
    """The directory for closedloop's state, models and runs, read at each call.

    ``$CLOSEDLOOP_HOME`` when set and non-empty, else ``~/.cache/closedloop``. Not created here.
    """
    configured = os.environ.get("CLOSEDLOOP_HOME", "").strip()
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "closedloop"
