"""The real-model-call guard: unit tests run with real calls blocked unless they opt in.

A process-wide switch rather than a context variable: pytest fixtures, event loops and
worker threads all see the same value, which is what a test-suite safety net needs.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from .._exceptions import RealModelCallBlockedError

__all__ = [
    "allow_real_model_calls",
    "block_real_model_calls",
    "check_real_model_call",
    "real_model_calls_allowed",
    "set_real_model_calls_allowed",
]

_lock = threading.Lock()
_allowed = True


def real_model_calls_allowed() -> bool:
    """Whether adapters that reach a real model may run now."""
    return _allowed


def set_real_model_calls_allowed(allowed: bool) -> bool:
    """Set the switch; returns the previous value."""
    global _allowed
    with _lock:
        previous, _allowed = _allowed, bool(allowed)
    return previous


@contextmanager
def allow_real_model_calls(allowed: bool = True) -> Iterator[None]:
    """Within the block real model calls are allowed (or blocked with ``allowed=False``)."""
    previous = set_real_model_calls_allowed(allowed)
    try:
        yield
    finally:
        set_real_model_calls_allowed(previous)


@contextmanager
def block_real_model_calls() -> Iterator[None]:
    """Within the block any real model call raises ``RealModelCallBlockedError``."""
    with allow_real_model_calls(False):
        yield


def check_real_model_call(model: str) -> None:
    """Raise ``RealModelCallBlockedError`` if real calls are blocked."""
    if not _allowed:
        raise RealModelCallBlockedError(
            f"real model call to {model!r} blocked: real model calls are off here (unit "
            "tests); use FunctionModel/ScriptedModel, or mark the test @pytest.mark.real_model"
        )
