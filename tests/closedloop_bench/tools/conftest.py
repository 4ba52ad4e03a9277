"""Test configuration of the tool-calling benchmark: real model calls are blocked unless a
test is marked ``real_model``, as in the library's own suite."""

from __future__ import annotations

import gzip
import importlib.util
import json
import math
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from closedloop.models import allow_real_model_calls


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "real_model: the test may call real models (local GGUF or a real server)"
    )


BENCH = Path(__file__).resolve().parents[3] / "bench"
BenchScript = Callable[[str], ModuleType]
"""The ``bench_script`` fixture's type: a script's name in, the loaded module out."""


@pytest.fixture
def bench_script() -> BenchScript:
    """Loads a script of bench/ by its name (``tools``, ``tools_replay``, ...) as a module."""

    def load(name: str) -> ModuleType:
        spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        return module

    return load


@pytest.fixture(autouse=True)
def _real_model_guard(request: pytest.FixtureRequest) -> Iterator[None]:
    allowed = request.node.get_closest_marker("real_model") is not None
    with allow_real_model_calls(allowed):
        yield


# A hand-made sample bank in the recorder's format: five eval tasks (one per family, in the
# interleaved order) on two models. Each sample is "R" (the oracle's calls: right), "W" (a
# wrong answer), "V" (another wrong answer) or "X" (a reply that did not parse), with its
# p_low (None: no logprobs). Costs are fixed per index so replayed costs can be summed by hand.
SYNTHETIC_STRONG = [
    [("R", 0.9), ("R", 0.5), ("R", 0.5), ("R", 0.5), ("R", 0.5)],
    [("W", 0.3), ("R", 0.5), ("R", 0.5), ("V", 0.5), ("R", 0.5)],
    [("R", 0.4), ("W", 0.1), ("W", 0.1), ("R", 0.5), ("W", 0.5)],
    [("X", None), ("W", 0.5), ("R", 0.5), ("R", 0.5), ("W", 0.5)],
    [("R", 0.95), ("V", 0.5), ("V", 0.5), ("V", 0.5), ("V", 0.5)],
]
SYNTHETIC_WEAK = [
    [("R", 0.8), ("R", 0.5), ("R", 0.5), ("R", 0.5), ("R", 0.5)],
    [("W", 0.9), ("W", 0.5), ("W", 0.5), ("W", 0.5), ("W", 0.5)],
    [("W", 0.2), ("R", 0.5), ("W", 0.5), ("W", 0.5), ("W", 0.5)],
    [("R", 0.7), ("R", 0.5), ("W", 0.5), ("R", 0.5), ("R", 0.5)],
    [("W", 0.1), ("V", 0.5), ("R", 0.5), ("W", 0.5), ("W", 0.5)],
]
STRONG_SECONDS = (2.0, 0.5, 0.6, 0.7, 0.8)
WEAK_SECONDS = (1.0, 0.2, 0.2, 0.2, 0.2)


def _synthetic_calls(task: Any, kind: str) -> list[dict[str, Any]]:
    from closedloop_bench.tools._oracle import oracle_calls

    if kind == "R":
        return [c.as_dict() for c in oracle_calls(task)]
    if kind == "V":
        return [{"name": "not_offered", "arguments": {}}]
    # "W": no call where one is expected; a call where none fits.
    first = next(iter(task.functions))
    return [{"name": first, "arguments": {}}] if task.expected.no_call else []


def synthetic_row(task: Any, spec: list[tuple[str, float | None]], seconds: Any) -> dict[str, Any]:
    """One bank task line for ``task`` from a list of (kind, p_low)."""
    samples = []
    for i, (kind, p_low) in enumerate(spec):
        calls = [] if kind == "X" else _synthetic_calls(task, kind)
        keys = sorted(json.dumps([c["name"], c["arguments"]], sort_keys=True) for c in calls)
        samples.append(
            {
                "index": i,
                "temperature": 0.0 if i == 0 else 0.7,
                "seed": i,
                "text": "{" if kind == "X" else json.dumps(calls),
                "key": None if kind == "X" else json.dumps([keys, "" if keys else "no-call"]),
                "calls": calls,
                "answer": "" if calls or kind == "X" else "No offered function fits.",
                "error": "Expecting value" if kind == "X" else None,
                "success": False,  # stale on purpose: a replay must re-score
                "logprob_mean": None if p_low is None else math.log(p_low) / 2,
                "logprob_min": None if p_low is None else math.log(p_low) * 1.5,
                "logprob_low": None if p_low is None else math.log(p_low),
                "decision_tokens": 3,
                "prompt_tokens": 100 if i == 0 else 5,
                "completion_tokens": 10,
                "seconds": seconds[i],
            }
        )
    return {
        "kind": "task",
        "task_id": task.id,
        "family": task.family,
        "domain": task.domain,
        "samples": samples,
    }


def write_synthetic_bank(path: Path, model: str, specs: Any, seconds: Any) -> Path:
    """A multi-member gzip bank, one member per line, as the recorder appends it."""
    from closedloop_bench.tools._command import interleave
    from closedloop_bench.tools._generate import DATA_DIR
    from closedloop_bench.tools._replay_command import _tasks_by_id

    tasks = interleave(list(_tasks_by_id((DATA_DIR / "eval.jsonl").resolve()).values()))
    tasks = tasks[: len(specs)]
    header = {
        "kind": "header",
        "model": model,
        "split": "eval",
        "k": 5,
        "temperature": 0.7,
        "max_tokens": 160,
        "prompt": "strict",
        "threads": 2,
        "command": "synthetic",
    }
    path.unlink(missing_ok=True)
    for row in [header, *(synthetic_row(t, s, seconds) for t, s in zip(tasks, specs, strict=True))]:
        with gzip.open(path, "at", encoding="utf-8") as handle:
            handle.write(json.dumps(row) + "\n")
    return path


@pytest.fixture
def synthetic_banks(tmp_path: Path) -> tuple[Path, Path]:
    """(strong bank, weak bank) paths: qwen2.5-coder-0.5b and smollm2-135m, five tasks."""
    strong = write_synthetic_bank(
        tmp_path / "qwen2.5-coder-0.5b-eval.jsonl.gz",
        "qwen2.5-coder-0.5b",
        SYNTHETIC_STRONG,
        STRONG_SECONDS,
    )
    weak = write_synthetic_bank(
        tmp_path / "smollm2-135m-eval.jsonl.gz", "smollm2-135m", SYNTHETIC_WEAK, WEAK_SECONDS
    )
    return strong, weak
