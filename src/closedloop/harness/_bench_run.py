"""What every refine bench run shares: its tasks, its model and how it samples, the cache.

``closedloop bench refine`` (:class:`BenchConfig`) and its ``--budget`` form
(:class:`BudgetBenchConfig`) differ in what they run on the tasks (strategies for a
number of rounds, or policies under a batch budget); the tasks, the model, the sampling
settings, the generation cache and the output folder are these, checked the same way,
loaded the same way and reported under the same names.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from .._exceptions import ConfigurationError
from .._validation import require_int_at_least
from ..models import Model, load_model
from ._cache import GenerationCache
from ._generator import Generation, ModelGenerator
from ._humaneval import load_humaneval
from ._sandbox import Sandbox
from ._task_file import load_verified_tasks
from ._tasks import CodeTask
from ._tasks_seed import SEED_TASKS

__all__ = ["BenchRun", "load_tasks", "model_generator"]


@dataclass(frozen=True, slots=True, kw_only=True)
class BenchRun:
    """The settings every refine bench run has (the CLI options map one to one)."""

    # The four built-in tasks, HumanEval, or a JSONL file in HumanEval's form (a Path).
    tasks: Literal["seed", "humaneval"] | Path = "seed"
    limit: int | None = None
    model: str = "local:qwen2.5-coder-0.5b"
    temperature: float = 0.2
    seed: int = 0
    max_tokens: int = 768
    out: Path | None = None
    # A SQLite file that keeps generations between runs (None: in memory, this run only).
    cache_path: Path | None = None
    # llama.cpp threads for a local model (None: every core). On cores shared with other
    # work, one thread avoids the spin-waits of a thread whose partner was descheduled.
    threads: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.tasks, Path):
            if not self.tasks.is_file():
                raise ConfigurationError("tasks", str(self.tasks), "no such task file")
        elif self.tasks not in ("seed", "humaneval"):
            raise ConfigurationError(
                "tasks", self.tasks, "must be 'seed', 'humaneval' or the Path of a task file"
            )
        if self.limit is not None:
            require_int_at_least("limit", self.limit, 1)
        if self.threads is not None:
            require_int_at_least("threads", self.threads, 1)

    def tasks_label(self) -> str:
        """The tasks as a report's heading names them (a task file by its name)."""
        return self.tasks.name if isinstance(self.tasks, Path) else self.tasks

    def run_json(self) -> dict[str, Any]:
        """These settings as a report's configuration shows them (JSON-ready)."""
        return {
            "tasks": str(self.tasks),
            "limit": self.limit,
            "model": self.model,
            "temperature": self.temperature,
            "seed": self.seed,
            "max_tokens": self.max_tokens,
            "threads": self.threads,
        }


async def load_tasks(config: BenchRun, sandbox: Sandbox | None = None) -> list[CodeTask]:
    """The run's tasks, at most ``config.limit`` of them; a user's file is checked first."""
    if isinstance(config.tasks, Path):
        # A user's file: its references must hold up before any model is called.
        problems = await load_verified_tasks(config.tasks, sandbox, limit=config.limit)
        return [p.task() for p in problems]
    if config.tasks == "seed":
        tasks = list(SEED_TASKS)
        return tasks[: config.limit] if config.limit is not None else tasks
    return [p.task() for p in load_humaneval(limit=config.limit)]


def model_generator(
    config: BenchRun, model: Model | None, *, cache_only: bool = False
) -> ModelGenerator:
    """The generator a bench run calls: ``model`` (None: the config's, loaded) behind the
    config's cache (None: a dict, this run only), so that reruns and shards share
    completions."""
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
