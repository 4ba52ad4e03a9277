"""A model wrapper that times each call for its run and feeds the service's metrics."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..models import Completion, MessagesInput, Model, OpenAICompatible
from ._metrics import ServiceMetrics

__all__ = ["MeteredModel"]


class MeteredModel:
    """A model wrapper that times each call for one run and feeds the service's metrics."""

    def __init__(
        self,
        inner: Model,
        metrics: ServiceMetrics,
        *,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.inner = inner
        self.metrics = metrics
        self._clock = clock
        self.model_s = 0.0
        self.calls = 0

    def __repr__(self) -> str:
        return f"MeteredModel({self.inner!r})"

    @property
    def name(self) -> str:
        """The wrapped model's name."""
        return self.inner.name

    @property
    def supports_tool_calls(self) -> bool:
        """Whether the wrapped model calls tools natively (the loop asks)."""
        return isinstance(self.inner, OpenAICompatible) or bool(
            getattr(self.inner, "supports_tool_calls", False)
        )

    async def complete(
        self,
        messages: MessagesInput,
        *,
        response_schema: Mapping[str, Any] | None = None,
        max_tokens: int = 256,
        temperature: float = 0.0,
        stop: str | Sequence[str] | None = None,
        seed: int | None = None,
        timeout: float | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        call_id: str | None = None,
    ) -> Completion:
        """The wrapped model's answer, timed."""
        started = self._clock()
        try:
            completion = await self.inner.complete(
                messages,
                response_schema=response_schema,
                max_tokens=max_tokens,
                temperature=temperature,
                stop=stop,
                seed=seed,
                timeout=timeout,
                tools=tools,
                call_id=call_id,
            )
        except BaseException:
            self.model_s += max(0.0, self._clock() - started)
            self.metrics.model_error(self.name)
            raise
        elapsed = max(0.0, self._clock() - started)
        self.model_s += elapsed
        self.calls += 1
        self.metrics.model_call(
            self.name,
            completion.latency_s or elapsed,
            completion.usage.prompt_tokens,
            completion.usage.completion_tokens,
        )
        return completion
