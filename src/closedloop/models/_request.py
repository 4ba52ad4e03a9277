"""``ModelRequest``: every setting of one model call except the messages, as one frozen value.

``await model.complete(messages, ModelRequest(max_tokens=64, response_schema=schema))``.
The request is checked when it is built, so a bad setting fails where it is written, with
an error naming the field and the value, not deep inside an adapter. Wrappers pass the
request on unchanged or adjust one field with ``request.replace(timeout=...)``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from .._exceptions import ConfigurationError
from .._validation import require_int_at_least, require_positive, require_temperature
from ._json import check_schema

__all__ = ["DEFAULT_REQUEST", "ModelRequest"]

_SEED_LIMIT = 2**32  # backends take an unsigned 32-bit sampling seed


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ModelRequest:
    """How to answer one call.

    ``response_schema`` (a JSON Schema) asks for JSON: adapters constrain decoding where
    they can, and the answer is parsed and validated into ``Completion.parsed``.
    ``max_tokens`` (at least 1) caps the completion; ``temperature`` lies in [0, 2];
    ``stop`` holds stop sequences (one string is one sequence); ``seed`` (in [0, 2**32))
    makes sampling reproducible where the backend allows. ``timeout`` (seconds, > 0)
    bounds the whole call, and running past it raises ``ModelTimeoutError``; None leaves
    the adapter's default. ``tools`` (OpenAI-style tool dicts) go to backends that call
    tools natively. ``call_id`` is the id the ``Completion`` carries: a fresh one is drawn
    when it is None; a wrapper that must know the id before the call sets it.
    ``logprobs`` asks for the generated tokens' log-probabilities (``Completion.logprobs``
    and ``Completion.confidence``) from backends that can give them.

    ``stop`` and ``tools`` are stored as tuples; the schema and tool dicts are kept as
    given (not copied), so do not change them after building the request.
    """

    response_schema: Mapping[str, Any] | None = None
    max_tokens: int = 256
    temperature: float = 0.0
    stop: Sequence[str] = ()
    seed: int | None = None
    timeout: float | None = None
    tools: Sequence[Mapping[str, Any]] = ()
    call_id: str | None = None
    logprobs: bool = False

    def __post_init__(self) -> None:
        # Frozen: normalised values are written once, here, through object.__setattr__.
        set_ = object.__setattr__
        require_int_at_least("max_tokens", self.max_tokens, 1)
        set_(self, "temperature", float(require_temperature("temperature", self.temperature)))
        if self.seed is not None:
            require_int_at_least("seed", self.seed, 0)
            if self.seed >= _SEED_LIMIT:
                raise ConfigurationError("seed", self.seed, "must be < 2**32")
        if self.timeout is not None:
            set_(self, "timeout", require_positive("timeout", self.timeout))
        if self.response_schema is not None:
            check_schema(self.response_schema)
        if self.call_id is not None and (not isinstance(self.call_id, str) or not self.call_id):
            raise ConfigurationError("call_id", self.call_id, "must be a non-empty string")
        set_(self, "stop", _stop_tuple(self.stop))
        set_(self, "tools", _tools_tuple(self.tools))

    def replace(self, **changes: Any) -> ModelRequest:
        """A copy with ``changes`` applied, checked like a new request."""
        return dataclasses.replace(self, **changes)


def _stop_tuple(stop: Sequence[str] | None) -> tuple[str, ...]:
    if stop is None:
        return ()
    items = (stop,) if isinstance(stop, str) else stop
    if not isinstance(items, Sequence) or not all(isinstance(s, str) and s for s in items):
        raise ConfigurationError("stop", stop, "must be a non-empty string or a list of them")
    return tuple(items)


def _tools_tuple(tools: Sequence[Mapping[str, Any]] | None) -> tuple[Mapping[str, Any], ...]:
    if tools is None:
        return ()
    if (
        isinstance(tools, Mapping | str | bytes)
        or not isinstance(tools, Sequence)
        or not all(isinstance(t, Mapping) for t in tools)
    ):
        raise ConfigurationError("tools", tools, "must be a list of OpenAI-style tool dicts")
    return tuple(tools)


DEFAULT_REQUEST = ModelRequest()
"""The request ``complete`` uses when none is given: 256 tokens at temperature 0."""
