"""Optional dependencies: import one, or say which extra brings it.

``pip install closedloop`` brings the core only; plots, the service, local models and the
other heavy parts come with extras (``closedloop[plots]``, ``closedloop[server]`` ...).
A part that needs one imports it through :func:`require_extra`, so a missing extra is one
clear sentence, not a bare ``ModuleNotFoundError`` from deep inside.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from ._exceptions import ClosedLoopError

__all__ = ["MissingExtraError", "require_extra"]


class MissingExtraError(ClosedLoopError, ImportError):
    """An optional dependency is not installed; the message names the extra that brings it."""


def require_extra(module: str, extra: str, purpose: str) -> ModuleType:
    """Import ``module`` (for ``purpose``), or raise naming ``closedloop[extra]``."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(
            f"{purpose} needs {module.partition('.')[0]}, which comes with the "
            f"{extra!r} extra: pip install 'closedloop[{extra}]'",
            name=module,
        ) from exc
