"""``MeteredModel``: what one run (or one benchmark episode) spent on its model.

It counts calls, failed calls and tokens, and keeps two clocks apart: ``charged_s`` sums
the compute time each completion reports (for an answer replayed from a cache, what it
cost when it was made) and ``waited_s`` the wall time spent awaiting the model, any queue
in front of it included. Their difference is the time a shared model made the run wait,
so a run's latency can be stated as if it had the model to itself. A ``listener`` (the
service's metrics) hears of every call as it ends.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

from ._completion import Completion, MessagesInput
from ._protocol import Model
from ._request import DEFAULT_REQUEST, ModelRequest
from ._wrapper import WrapperModel

__all__ = ["MeteredModel", "ModelCallListener"]


class ModelCallListener(Protocol):
    """Told of every call a ``MeteredModel`` forwards."""

    def model_call(
        self, model: str, latency_s: float, prompt_tokens: int, completion_tokens: int
    ) -> None:
        """A call that answered; ``latency_s`` is the completion's own (else the wall time)."""

    def model_error(self, model: str) -> None:
        """A call that raised (cancellation included)."""


class MeteredModel(WrapperModel):
    """Wraps ``inner`` and meters each call: ``calls``, ``errors``, ``prompt_tokens``,
    ``completion_tokens``, ``charged_s`` and ``waited_s`` (see the module). ``clock`` is
    injectable; ``listener`` hears of every call."""

    def __init__(
        self,
        inner: Model,
        *,
        listener: ModelCallListener | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        super().__init__(inner)
        self.listener = listener
        self._clock = clock
        self.calls = 0
        self.errors = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.charged_s = 0.0
        self.waited_s = 0.0

    async def complete(
        self, messages: MessagesInput, request: ModelRequest = DEFAULT_REQUEST
    ) -> Completion:
        """The wrapped model's answer, counted and timed."""
        started = self._clock()
        try:
            completion = await self.inner.complete(messages, request)
        except BaseException:
            self.waited_s += max(0.0, self._clock() - started)
            self.errors += 1
            if self.listener is not None:
                self.listener.model_error(self.name)
            raise
        elapsed = max(0.0, self._clock() - started)
        self.waited_s += elapsed
        self.calls += 1
        self.prompt_tokens += completion.usage.prompt_tokens
        self.completion_tokens += completion.usage.completion_tokens
        self.charged_s += completion.latency_s
        if self.listener is not None:
            self.listener.model_call(
                self.name,
                completion.latency_s or elapsed,
                completion.usage.prompt_tokens,
                completion.usage.completion_tokens,
            )
        return completion
