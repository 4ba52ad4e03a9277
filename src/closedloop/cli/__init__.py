"""The ``closedloop`` command line."""

from __future__ import annotations

from ._main import app, main

__all__ = ["app", "main"]
