"""Where a benchmark's model comes from, and what each episode spent on it.

``model_source("test:oracle")`` gives the deterministic competent model (one per
episode, bound to that episode's tools); any other spec (``local:qwen2.5-coder-0.5b``,
``openai-compatible:http://127.0.0.1:8080/v1#name``) gives one shared real model,
serialised (an embedded model answers one call at a time, so the queue is made explicit
and kept out of the latency figures) and, at temperature 0, cached on disk.

Each episode wraps its model in a :class:`~closedloop.models.MeteredModel`: calls,
tokens, the compute time the calls cost (a cache hit is charged what the call cost when
it was made) and the wall time spent waiting for the model, so an episode's latency can
be reported as if it had the model to itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from closedloop._exceptions import ConfigurationError
from closedloop.models import (
    DEFAULT_REQUEST,
    Completion,
    MessagesInput,
    Model,
    ModelRequest,
    WrapperModel,
    load_model,
    parse_model_spec,
)

from ..reference import ReferenceTask, WorldTools
from ._cache import CachingModel, CompletionCache
from ._testmodel import IdealReference, oracle_model

__all__ = [
    "TEST_MODELS",
    "ModelSource",
    "SerialModel",
    "model_source",
]

TEST_MODELS = ("test:oracle",)
"""Deterministic model specs the benchmarks know besides ``closedloop.models`` specs."""


class SerialModel(WrapperModel):
    """Lets one call at a time reach ``inner``, in arrival order."""

    def __init__(self, inner: Model) -> None:
        super().__init__(inner)
        self._lock = asyncio.Lock()

    async def complete(
        self, messages: MessagesInput, request: ModelRequest = DEFAULT_REQUEST
    ) -> Completion:
        """The wrapped model's answer, once the calls that came first have had theirs."""
        async with self._lock:
            return await self.inner.complete(messages, request)


class ModelSource:
    """Builds each episode's model and says what it is (for the report)."""

    def __init__(
        self,
        spec: str,
        *,
        shared: Model | None = None,
        oracle: IdealReference | None = None,
        cache: CachingModel | None = None,
    ) -> None:
        self.spec = spec
        self._shared = shared
        self._oracle = oracle
        self.cache = cache

    @property
    def deterministic(self) -> bool:
        """True for the test model: the same episode always gets the same answers."""
        return self._oracle is not None

    async def for_episode(self, task: ReferenceTask, tools: WorldTools) -> Model:
        """The model one episode of ``task`` talks to (before metering)."""
        if self._oracle is not None:
            expected = await self._oracle.expected(task)
            return oracle_model(task, tools, expected, name=self.spec)
        assert self._shared is not None
        return self._shared

    @property
    def shared(self) -> Model | None:
        """The one model every episode shares (None for the test model), to reuse elsewhere."""
        return self._shared

    def describe(self) -> dict[str, Any]:
        """The model and cache facts a report states."""
        out: dict[str, Any] = {"spec": self.spec, "deterministic": self.deterministic}
        if self.cache is not None:
            out["cache"] = {
                "path": str(self.cache.cache.path),
                "policy": "exact messages and parameters, temperature 0 only",
                **self.cache.stats.as_dict(),
            }
        return out


def model_source(
    spec: str | Model,
    *,
    cache: bool | str | Path = True,
    options: Mapping[str, Any] | None = None,
) -> ModelSource:
    """The source for ``spec``: ``test:oracle``, a ``closedloop.models`` spec, or a model.

    ``cache``: True for ``$CLOSEDLOOP_HOME/cache/completions.sqlite``, a path for another
    file, False for none (test models are never cached). ``options`` go to ``load_model``;
    local models default to ``prompt_cache=True`` (the completion cache keeps runs
    reproducible).
    """
    if isinstance(spec, Model):
        return ModelSource(spec.name, shared=spec)
    if not isinstance(spec, str) or not spec:
        raise ConfigurationError("model", spec, "must be a model spec or a Model")
    if spec.startswith("test:"):
        if spec not in TEST_MODELS:
            raise ConfigurationError("model", spec, f"test models: {', '.join(TEST_MODELS)}")
        return ModelSource(spec, oracle=IdealReference())
    parsed = parse_model_spec(spec)
    extra = dict(options or {})
    if parsed.kind == "local":
        extra.setdefault("prompt_cache", True)
    real: Model = SerialModel(load_model(spec, **extra))
    caching: CachingModel | None = None
    if cache is not False:
        path = None if cache is True else cache
        caching = CachingModel(real, CompletionCache(path))
        real = caching
    return ModelSource(spec, shared=real, cache=caching)
