"""Where a public name presents itself: the public module it is documented under.

The classes and functions of a public module are defined in private ones; re-homing their
``__module__`` makes reprs, pickles and the API reference show the public path (httpx does
the same), whichever module is imported first.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import FunctionType
from typing import Any

__all__ = ["present_under"]


def present_under(namespace: Mapping[str, Any], names: Iterable[str], module: str) -> None:
    """Give each class and function among ``names`` in ``namespace`` the ``__module__``
    ``module``; other objects (constants, aliases) carry no module of their own."""
    for name in names:
        obj = namespace[name]
        if isinstance(obj, type | FunctionType):
            obj.__module__ = module
