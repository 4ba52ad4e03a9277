"""The generator every bench run builds the same way from its configuration.

The model named in the configuration (unless the caller passes one) behind the
configuration's generation cache, so that reruns and shards share completions.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import TYPE_CHECKING

from ..models import Model, load_model
from ._cache import GenerationCache
from ._generator import Generation, ModelGenerator

if TYPE_CHECKING:  # the configurations import this module
    from ._bench import BenchConfig
    from ._bench_budget import BudgetBenchConfig

__all__ = ["model_generator"]


def model_generator(
    config: BenchConfig | BudgetBenchConfig, model: Model | None, *, cache_only: bool = False
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
