"""The generator every bench run builds the same way from its configuration.

The model named in the configuration (unless the caller passes one) behind the
configuration's generation cache, so that reruns and shards share completions.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from pathlib import Path
from typing import Protocol

from ..models import Model, load_model
from ._cache import GenerationCache
from ._generator import Generation, ModelGenerator

__all__ = ["GenerationConfig", "model_generator"]


class GenerationConfig(Protocol):
    """The options of a bench configuration that say how completions are made and kept."""

    @property
    def model(self) -> str: ...
    @property
    def threads(self) -> int | None: ...
    @property
    def temperature(self) -> float: ...
    @property
    def max_tokens(self) -> int: ...
    @property
    def cache_path(self) -> Path | None: ...


def model_generator(
    config: GenerationConfig, model: Model | None, *, cache_only: bool = False
) -> ModelGenerator:
    """The generator a bench run calls: ``model`` (None: the config's, loaded) behind the
    config's cache (None: a dict, this run only)."""
    if model is None:
        options = {} if config.threads is None else {"n_threads": config.threads}
        model = load_model(config.model, **options)
    cache: MutableMapping[str, Generation] = (
        GenerationCache(config.cache_path) if config.cache_path is not None else {}
    )
    return ModelGenerator(
        model,
        temperature=config.temperature,
        max_tokens=config.max_tokens,
        cache=cache,
        cache_only=cache_only,
    )
