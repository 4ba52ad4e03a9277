"""Diagnosis from structured results, and the PID-or-self-refine chooser."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from closedloop import ConfigurationError
from closedloop.harness import (
    LRU_CACHE,
    CheckResult,
    CodeTask,
    Evaluation,
    EvaluationStatus,
    ModelDiagnoser,
    choose_strategy,
    diagnose,
    not_run,
    should_use_pid,
)
from closedloop.models import CallInfo, FunctionModel, Message

from .conftest import ADD_TASK


def lru_evaluation(failing: dict[str, tuple[str | None, str | None, str | None]]) -> Evaluation:
    checks = []
    for c in LRU_CACHE.checks:
        if c.name in failing:
            got, expected, error = failing[c.name]
            checks.append(
                CheckResult(
                    name=c.name, passed=False, call=c.call, got=got, expected=expected, error=error
                )
            )
        else:
            checks.append(CheckResult(name=c.name, passed=True, call=c.call))
    return Evaluation(status=EvaluationStatus.FAILED, reason="x", checks=tuple(checks))


SEED_ROUND_1 = lru_evaluation(
    {"T3": ("2", "-1", None), "T7": ("3", "-1", None), "T10": ("1", "-1", None)}
)


def test_lru_round_one_is_one_pattern_with_a_related_path() -> None:
    d = diagnose(SEED_ROUND_1, LRU_CACHE)
    assert dict(d.patterns) == {"get() returns a wrong result": ("T3", "T7", "T10")}
    assert d.suspected == ("put() must refresh recency too when it updates an existing key",)
    assert (d.distinct_bugs, d.correlated) == (2, True)
    assert d.lines() == ["get() returns a wrong result: T3, T7, T10."]


def test_seed_lru_case_goes_to_pid() -> None:
    choice = choose_strategy(SEED_ROUND_1, LRU_CACHE)
    assert choice.strategy == "pid_feedback"
    assert "correlated" in choice.reason


def test_exceptions_are_grouped_by_kind_and_line_with_hints() -> None:
    ev = lru_evaluation(
        {
            "T1": (None, None, "raised KeyError: 1 (line 9: return self.data[key])"),
            "T2": (None, None, "raised KeyError: 3 (line 9: return self.data[key])"),
            "T4": (None, None, "timeout: the check ran longer than 2.0 s"),
        }
    )
    d = diagnose(ev, LRU_CACHE)
    assert dict(d.patterns) == {
        "KeyError at line 9 (`return self.data[key]`)": ("T1", "T2"),
        "a check timed out": ("T4",),
    }
    assert any("missing keys" in h for h in d.hints)
    assert any("loop" in h for h in d.hints)


def test_whole_run_failures_say_why_and_hint_at_the_fix() -> None:
    ev = not_run(ADD_TASK, EvaluationStatus.SYNTAX_ERROR, "line 1: invalid syntax")
    d = diagnose(ev, ADD_TASK)
    assert d.lines() == ["The code did not run through the checks: line 1: invalid syntax."]
    assert any("```python" in h for h in d.hints)
    assert d.suspected == ()
    ev = not_run(ADD_TASK, EvaluationStatus.LOAD_ERROR, "the code does not define 'add'")
    assert any("define `add`" in h for h in diagnose(ev, ADD_TASK).hints)


def test_should_use_pid_follows_the_rule() -> None:
    assert should_use_pid(0.8, 3, True).strategy == "self_refine"
    # 0.7 is not "more than 70 %": the LRU example (7/10) goes on to the bug count.
    assert should_use_pid(0.7, 2, True).strategy == "pid_feedback"
    assert should_use_pid(0.5, 1, True).strategy == "self_refine"
    assert should_use_pid(0.5, 2, True).strategy == "pid_feedback"
    assert should_use_pid(0.5, 2, False).strategy == "pid_feedback"
    assert should_use_pid(0.75, 2, True, easy_above=0.8).strategy == "pid_feedback"
    with pytest.raises(ConfigurationError, match="first_round_pass_rate"):
        should_use_pid(1.5, 1, False)


@given(rate=st.floats(0.0, 1.0), bugs=st.integers(0, 5), correlated=st.booleans())
def test_chooser_never_picks_pid_for_easy_or_single_bug_tasks(
    rate: float, bugs: int, correlated: bool
) -> None:
    choice = should_use_pid(rate, bugs, correlated)
    if rate > 0.7 or bugs <= 1:
        assert choice.strategy == "self_refine"
    else:
        assert choice.strategy == "pid_feedback"


def test_single_pattern_without_related_paths_goes_to_self_refine() -> None:
    task = CodeTask(name="t", prompt="p", entry_point="add", checks=ADD_TASK.checks)
    checks = tuple(
        CheckResult(name=c.name, passed=c.name != "T1", call=c.call, got="0", expected="3")
        for c in task.checks
    )
    ev = Evaluation(status=EvaluationStatus.FAILED, reason="x", checks=checks)
    assert choose_strategy(ev, task).strategy == "self_refine"


async def test_model_diagnoser_asks_for_a_root_cause() -> None:
    prompts: list[str] = []

    def fn(messages: tuple[Message, ...], call: CallInfo) -> str:
        prompts.append(messages[-1].content)
        return "get() never\n moves the key to the end."

    diagnoser = ModelDiagnoser(FunctionModel(fn))
    note = await diagnoser(LRU_CACHE, "class LRUCache: ...\n", SEED_ROUND_1.failures)
    assert note == "get() never moves the key to the end."
    assert "T3: c = LRUCache(2)" in prompts[0] and "got 2, expected -1" in prompts[0]
    assert "Do not write code" in prompts[0]


def test_a_load_error_gets_the_hint_for_its_exception_kind() -> None:
    reason = "raised NameError: name 'time' is not defined (line 4: def __init__(self, clock=time.monotonic):)"
    ev = not_run(ADD_TASK, EvaluationStatus.LOAD_ERROR, reason)
    hints = diagnose(ev, ADD_TASK).hints
    assert any("add the missing import or definition" in h for h in hints)


def test_hints_name_what_the_code_lacks() -> None:
    reason = "raised NameError: name 'Node' is not defined (line 5: self.head = Node(0, 0))"
    ev = lru_evaluation({c.name: (None, None, reason) for c in LRU_CACHE.checks})
    hints = diagnose(ev, LRU_CACHE, "class LRUCache: ...").hints
    assert hints[0] == "`Node` is used but never defined: define it (or import it) in your code"
    code = "class Solution:\n    def add(self, a, b):\n        return a + b\n"
    ev = not_run(ADD_TASK, EvaluationStatus.LOAD_ERROR, "the code does not define 'add'")
    hints = diagnose(ev, ADD_TASK, code).hints
    assert (
        "`add` is a method of class `Solution`; write `add` as a top-level function instead"
        in hints
    )
