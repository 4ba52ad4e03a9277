"""The checker: every task is solved by its oracle, and each kind of wrong answer fails."""

from __future__ import annotations

from typing import Any

import pytest

from closedloop_bench.tools import (
    DATA_DIR,
    ArgRule,
    Call,
    ToolTask,
    load_tool_tasks,
    oracle_calls,
    replay,
    score,
)
from closedloop_bench.tools._score import rule_matches

ALL = load_tool_tasks(DATA_DIR / "dev.jsonl") + load_tool_tasks(DATA_DIR / "eval.jsonl")
WITH_CALLS = [t for t in ALL if not t.expected.no_call]


def test_every_generated_task_is_solved_by_its_oracle() -> None:
    failures = [(t.id, v.reason) for t in ALL if not (v := score(t, oracle_calls(t))).success]
    assert failures == []


def _mutated(value: Any, schema: dict[str, Any]) -> Any:
    if "enum" in schema:
        others = [v for v in schema["enum"] if v != value]
        return others[0] if others else "not-in-enum"
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 7
    if isinstance(value, str):
        return value + " extra"
    return "wrong"


def _wrong_argument(task: ToolTask) -> list[Call] | None:
    calls = oracle_calls(task)
    for index, call in enumerate(calls):
        properties = task.functions[call.name].properties
        for name, value in call.arguments.items():
            args = dict(call.arguments)
            args[name] = _mutated(value, properties[name])
            return [*calls[:index], Call(call.name, args), *calls[index + 1 :]]
    return None


def test_a_wrong_argument_fails_every_task() -> None:
    checked = 0
    for task in WITH_CALLS:
        calls = _wrong_argument(task)
        if calls is None:
            continue
        verdict = score(task, calls)
        assert not verdict.success, task.id
        assert verdict.wrong or verdict.state_diff, task.id
        checked += 1
    assert checked > 400


def test_a_missing_call_fails() -> None:
    for task in WITH_CALLS:
        calls = oracle_calls(task)
        verdict = score(task, calls[:-1])
        assert not verdict.success, task.id
        assert verdict.missing == (len(calls) - 1,) or verdict.state_diff, task.id


def test_an_extra_call_fails() -> None:
    for task in WITH_CALLS:
        calls = oracle_calls(task)
        verdict = score(task, [*calls, calls[0]])
        assert not verdict.success, task.id
        assert verdict.extra == (len(calls),) or verdict.state_diff, task.id


def test_a_call_on_an_irrelevance_task_fails() -> None:
    irrelevant = [t for t in ALL if t.expected.no_call]
    assert len(irrelevant) == 104
    for task in irrelevant:
        assert score(task, []).success
        name = next(iter(task.functions))
        verdict = score(task, [Call(name, {})])
        assert not verdict.success and verdict.extra == (0,)


def test_an_irrelevance_task_needs_an_answer_with_no_call_not_a_halt() -> None:
    task = next(t for t in ALL if t.expected.no_call)
    declined = score(task, [], "none of these can book a flight", answered=True)
    assert declined.success
    halted = score(task, [], "", answered=False)
    assert not halted.success and "halted with no answer" in halted.reason
    # Where a call is expected, a halt with no call fails as it always did.
    assert not score(WITH_CALLS[0], [], answered=False).success


def test_parallel_calls_match_in_any_order() -> None:
    parallel = [t for t in ALL if t.family == "parallel"]
    for task in parallel:
        assert score(task, list(reversed(oracle_calls(task)))).success, task.id


def test_no_call_where_calls_are_expected_says_so() -> None:
    verdict = score(WITH_CALLS[0], [])
    assert not verdict.success
    assert verdict.reason.startswith("no call where one was expected")


def test_order_matters_for_a_chained_ledger_task() -> None:
    chained = [
        t
        for t in ALL
        if t.env == "ledger"
        and not score(t, list(reversed(oracle_calls(t)))).success
        and score(t, oracle_calls(t)).success
    ]
    assert chained, "some ledger task must depend on the order of its calls"
    task = chained[0]
    state, results = replay(task, list(reversed(oracle_calls(task))))
    assert state is not None and results


def test_read_only_calls_are_allowed_on_stateful_tasks() -> None:
    task = next(t for t in ALL if t.env == "todo")
    verdict = score(task, [Call("list_todos", {}), *oracle_calls(task)])
    assert verdict.success, verdict.reason


def test_final_state_is_checked() -> None:
    task = next(t for t in ALL if t.env == "files")
    verdict = score(task, oracle_calls(task), env_state={"files": {}})
    assert not verdict.success and verdict.state_diff == ("files",)


@pytest.mark.parametrize(
    ("rule", "good", "bad"),
    [
        ({"exact": 3}, 3.0, 4),
        ({"exact": "a"}, "a", "A"),
        ({"one_of": ["x", "y"]}, "y", "z"),
        ({"number": 2.5, "tol": 0.01}, 2.505, 2.52),
        ({"text": "New York"}, " new york ", "NYC"),
        ({"any": True}, None, object()),
    ],
)
def test_rules(rule: dict[str, Any], good: Any, bad: Any) -> None:
    parsed = ArgRule.model_validate(rule)
    assert rule_matches(parsed, good)
    if parsed.kind != "any":
        assert not rule_matches(parsed, bad)


def test_booleans_are_not_numbers() -> None:
    assert not rule_matches(ArgRule.model_validate({"number": 1.0}), True)
    assert not rule_matches(ArgRule.model_validate({"exact": 1}), True)
