"""``WrapperModel``: a model in front of another model, forwarding everything to it.

Fault injection, metering, caching, serialising and the blocking bridge each change one
thing about a call. Built on ``WrapperModel`` each overrides that one method and inherits
the rest: the name, the call itself, the usage meter, the capabilities the agent asks
about (``supports_tool_calls``) and closing. A wrapper forwards capabilities faithfully,
so wrapping a model never changes how the agent talks to it.
"""

from __future__ import annotations

from typing import Any

from .._exceptions import ConfigurationError
from ._completion import Completion, MessagesInput
from ._protocol import Model
from ._request import DEFAULT_REQUEST, ModelRequest
from ._usage import UsageMeter

__all__ = ["WrapperModel"]


class WrapperModel:
    """Forwards ``complete``, ``name``, ``usage``, ``supports_tool_calls`` and ``aclose``
    to ``inner``; ``name=`` gives the wrapper a name of its own.

    A subclass overrides what it changes, usually ``complete`` alone, and reaches the
    wrapped model as ``self.inner``; ``innermost`` is the model at the end of a chain.
    """

    def __init__(self, inner: Model, *, name: str | None = None) -> None:
        if not isinstance(inner, Model):
            raise ConfigurationError("inner", inner, "must be a model (with .name and .complete)")
        if name is not None and (not isinstance(name, str) or not name):
            raise ConfigurationError("name", name, "must be a non-empty string or None")
        self.inner = inner
        self._own_name = name

    @property
    def name(self) -> str:
        """The wrapper's own name if it was given one, else the wrapped model's."""
        return self._own_name if self._own_name is not None else self.inner.name

    async def complete(
        self, messages: MessagesInput, request: ModelRequest = DEFAULT_REQUEST
    ) -> Completion:
        """The wrapped model's answer, unchanged."""
        return await self.inner.complete(messages, request)

    @property
    def usage(self) -> UsageMeter | None:
        """The wrapped model's usage meter (None when it keeps none)."""
        meter: Any = getattr(self.inner, "usage", None)
        return meter if isinstance(meter, UsageMeter) else None

    @property
    def supports_tool_calls(self) -> bool:
        """Whether the wrapped model calls tools natively."""
        return bool(getattr(self.inner, "supports_tool_calls", False))

    @property
    def supports_logprobs(self) -> bool:
        """Whether the wrapped model returns token logprobs when asked."""
        return bool(getattr(self.inner, "supports_logprobs", False))

    @property
    def innermost(self) -> Model:
        """The model at the end of a chain of wrappers."""
        model: Model = self.inner
        while isinstance(model, WrapperModel):
            model = model.inner
        return model

    async def aclose(self) -> None:
        """Close the wrapped model (its connections, its resources)."""
        close = getattr(self.inner, "aclose", None)
        if callable(close):
            await close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.inner!r})"
