"""Fixtures for the harness area: a fast sandbox, scripted evaluators, answer builders."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from closedloop.harness import (
    Check,
    CheckResult,
    CodeTask,
    Evaluation,
    EvaluationStatus,
    Sandbox,
    SandboxLimits,
)
from closedloop.models import CallInfo, Message


@pytest.fixture
def sandbox() -> Sandbox:
    """Short limits so the bad-input tests end quickly (wall-clock limits, not sleeps)."""
    return Sandbox(SandboxLimits(check_timeout_s=0.5, load_timeout_s=1.0, memory_mb=256))


ADD_TASK = CodeTask(
    name="add",
    prompt="Write add(a, b).",
    entry_point="add",
    checks=(
        Check("T1", "add(1, 2) == 3"),
        Check("T2", "add(-1, 1) == 0"),
        Check("T3", "add('a', 'b') == 'ab'"),
        Check("T4", "for i in range(5):\n    assert add(i, i) == 2 * i"),
    ),
)


def fenced(code: str, prose: str = "Here is the code:") -> str:
    """A model-style answer around ``code``."""
    return f"{prose}\n```python\n{code}```\nDone."


def score_task(n: int = 10) -> CodeTask:
    """A task with ``n`` trivial checks, for scripted evaluations."""
    return CodeTask(
        name=f"score{n}",
        prompt="Write f().",
        entry_point="f",
        checks=tuple(Check(f"T{i}", f"f() == {i}") for i in range(1, n + 1)),
    )


def scripted_evaluation(task: CodeTask, passed: int) -> Evaluation:
    """An evaluation in which the first ``passed`` checks pass and the rest got 0."""
    checks = tuple(
        CheckResult(
            name=c.name,
            passed=i < passed,
            call=c.call,
            got=None if i < passed else "0",
            expected=None if i < passed else c.name[1:],
        )
        for i, c in enumerate(task.checks)
    )
    status = EvaluationStatus.PASSED if passed == len(checks) else EvaluationStatus.FAILED
    return Evaluation(status=status, reason=f"{passed} passed", checks=checks)


class ScriptedEvaluator:
    """An evaluator that reads the pass count from the code itself: ``# passes N``."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def __call__(self, task: CodeTask, code: str) -> Evaluation:
        self.calls.append(code)
        marker = [line for line in code.splitlines() if line.startswith("# passes ")]
        passed = int(marker[0].split()[-1]) if marker else 0
        return scripted_evaluation(task, passed)


def script_answers(
    passes: Sequence[int],
) -> Callable[[tuple[Message, ...], CallInfo], str]:
    """A FunctionModel fn whose k-th call answers code that passes ``passes[k]`` checks."""
    state = {"k": 0}

    def fn(messages: tuple[Message, ...], call: CallInfo) -> str:
        k = min(state["k"], len(passes) - 1)
        state["k"] += 1
        return fenced(f"# passes {passes[k]}\ndef f():\n    return {k}\n")

    return fn
