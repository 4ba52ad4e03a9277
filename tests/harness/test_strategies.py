"""What each strategy sends between rounds, the control signal behind it, and its levels."""

from __future__ import annotations

import pytest

from closedloop import ConfigurationError
from closedloop.control import PID
from closedloop.harness import (
    SYSTEM_PROMPT,
    Check,
    CheckResult,
    CodeTask,
    Evaluation,
    EvaluationStatus,
    ModelGenerator,
    RefinementResult,
    Refiner,
    Strategy,
    auto,
    blind_retry,
    interval,
    pid_feedback,
    self_refine,
    stop_after_rounds,
    strategy_from_spec,
)
from closedloop.models import CallInfo, FunctionModel, Message

from .conftest import ScriptedEvaluator, fenced, score_task, script_answers

TASK = score_task(10)


async def run(
    strategy: Strategy, passes: list[int], *, rounds: int | None = None, task: CodeTask = TASK
) -> tuple[RefinementResult, FunctionModel, ScriptedEvaluator]:
    model = FunctionModel(script_answers(passes))
    evaluator = ScriptedEvaluator()
    refiner = Refiner(
        ModelGenerator(model),
        evaluator,
        strategy,
        stop=stop_after_rounds(99),
        max_rounds=rounds or len(passes),
    )
    return await refiner.run(task), model, evaluator


async def test_blind_retry_sends_the_task_and_nothing_else() -> None:
    result, model, _ = await run(blind_retry(), [7, 8, 4])
    assert all(call.messages == model.calls[0].messages for call in model.calls)
    assert [m.role for m in model.calls[0].messages] == ["system", "user"]
    assert model.calls[0].messages[0].content == SYSTEM_PROMPT
    assert all(r.feedback is None and r.control is None for r in result.rounds)
    assert result.scores == (0.7, 0.8, 0.4)


async def test_self_refine_sends_the_last_code_and_its_score_without_specifics() -> None:
    result, model, _ = await run(self_refine(), [7, 8])
    messages = model.calls[1].messages
    assert [m.role for m in messages] == ["system", "user", "assistant", "user"]
    assert "# passes 7" in messages[2].content
    text = messages[3].content
    assert text == result.rounds[1].feedback
    assert "passes 7 of 10 tests" in text and "improve" in text
    for specific in ("T8", "got", "expected", "Diagnosis", "u ="):
        assert specific not in text
    assert result.rounds[1].control is None


async def test_pid_feedback_is_precise_and_light_at_seventy_percent() -> None:
    result, model, _ = await run(pid_feedback(), [7, 10])
    r2 = result.rounds[1]
    # Worked example: e = 0.3; P = 0.18, I = 0.06; no derivative on the first sample -> 0.24.
    assert r2.control == pytest.approx(0.24)
    assert (r2.level, r2.gains) == ("light", (0.6, 0.2, 0.15))
    text = model.calls[1].messages[-1].content
    assert text == r2.feedback
    assert text.startswith("Your code passes 7 of 10 tests.\nFailing tests:\n")
    assert "- T8: f() returned 0, expected 8" in text
    assert "- T10: f() returned 0, expected 10" in text
    assert "fix only the specific bugs" in text
    # The signal sets the wording; the number itself means nothing to a model.
    assert "0.24" not in text and "intensity" not in text
    assert "# passes 7" in model.calls[1].messages[2].content


@pytest.mark.parametrize(
    ("passed", "u", "level", "phrase"),
    [
        (7, 0.24, "light", "fix only the specific bugs"),
        (5, 0.40, "medium", "rewrite the faulty function(s)"),
        (2, 0.64, "heavy", "Write a new implementation from scratch"),
        (0, 0.80, "heavy", "Write a new implementation from scratch"),
    ],
)
async def test_pid_levels_follow_the_thresholds(
    passed: int, u: float, level: str, phrase: str
) -> None:
    result, model, _ = await run(pid_feedback(), [passed, passed])
    r2 = result.rounds[1]
    assert r2.control == pytest.approx(u)
    assert r2.level == level
    assert r2.feedback is not None and phrase in r2.feedback
    messages = model.calls[1].messages
    if level == "heavy":
        # A new approach: the old code is not shown; task and failures are.
        assert [m.role for m in messages] == ["system", "user"]
        assert messages[1].content == f"{TASK.prompt}\n\n{r2.feedback}"
        assert "Failing tests:" in messages[1].content
        assert "A previous attempt passes" in messages[1].content
    else:
        assert [m.role for m in messages] == ["system", "user", "assistant", "user"]
        assert messages[3].content == r2.feedback


def same_answer(passed: int) -> FunctionModel:
    """A model that hands back the same program every time, as a small model often does."""
    return FunctionModel(
        lambda messages, call: fenced(f"# passes {passed}\ndef f():\n    return 0\n")
    )


async def test_a_repeated_program_makes_the_next_round_heavy() -> None:
    refiner = Refiner(
        ModelGenerator(same_answer(8)),
        ScriptedEvaluator(),
        pid_feedback(),
        stop=stop_after_rounds(99),
        max_rounds=3,
    )
    result = await refiner.run(TASK)
    r2, r3 = result.rounds[1], result.rounds[2]
    # e = 0.2 both times: u = 0.16, then 0.12 + 0.08 = 0.20, light by the thresholds.
    assert r2.level == "light" and r3.control == pytest.approx(0.20)
    # Round 2 repeated round 1's program (a comment apart would not matter either).
    assert r3.level == "heavy"
    assert r3.feedback is not None and "from scratch" in r3.feedback
    model = refiner.generator.model  # type: ignore[attr-defined]
    assert [m.role for m in model.calls[2].messages] == ["system", "user"]


async def test_without_escalation_a_repeat_keeps_the_level_u_gives() -> None:
    refiner = Refiner(
        ModelGenerator(same_answer(8)),
        ScriptedEvaluator(),
        pid_feedback(escalate_on_repeat=False),
        stop=stop_after_rounds(99),
        max_rounds=3,
    )
    result = await refiner.run(TASK)
    assert [r.level for r in result.rounds[1:]] == ["light", "light"]


async def test_after_a_regression_light_feedback_edits_the_best_code() -> None:
    # Gains halve after the regression, so u stays low enough for light/medium feedback.
    result, model, _ = await run(pid_feedback(), [7, 5, 9])
    r3 = result.rounds[2]
    assert r3.level in ("light", "medium")
    shown = model.calls[2].messages
    assert "# passes 7" in shown[2].content and "# passes 5" not in shown[2].content
    # The failures described are the best round's (T8..T10), not the worse last one's.
    assert r3.feedback is not None and "passes 7 of 10" in r3.feedback
    assert "T6:" not in r3.feedback and "- T8: f() returned 0, expected 8" in r3.feedback


async def test_humaneval_candidate_is_named_by_the_entry_point() -> None:
    task = CodeTask(
        name="he",
        prompt="Write add(a, b).",
        entry_point="add",
        checks=(Check("A1", "candidate(1, 2) == 3"), Check("A2", "candidate(2, 2) == 4")),
    )

    class Wrong:
        async def __call__(self, task: CodeTask, code: str) -> Evaluation:
            return Evaluation(
                status=EvaluationStatus.FAILED,
                reason="0 of 2",
                checks=tuple(
                    CheckResult(name=c.name, passed=False, call=c.call, got="0", expected="3")
                    for c in task.checks
                ),
            )

    model = FunctionModel(lambda messages, call: fenced("def add(a, b):\n    return 0\n"))
    refiner = Refiner(ModelGenerator(model), Wrong(), pid_feedback(), max_rounds=2)
    result = await refiner.run(task)
    text = result.rounds[1].feedback or ""
    assert "- A1: add(1, 2) returned 0, expected 3" in text
    assert "candidate" not in text


async def test_pid_signal_over_rounds_matches_the_control_kernel() -> None:
    passes = [5, 6, 6, 8]
    result, _, _ = await run(pid_feedback(gain_reduction=1.0), [*passes, 8])
    reference = PID(0.6, 0.2, 0.15, setpoint=1.0, output_limits=(0.0, 1.0), derivative_on="error")
    expected = [reference(p / 10, dt=1.0) for p in passes]
    assert [r.control for r in result.rounds[1:]] == pytest.approx(expected)
    # Round 3 by hand: e = 0.4, P = 0.24, I = 0.1 + 0.08, D = 0.15 * (0.4 - 0.5) -> 0.405.
    assert result.rounds[2].control == pytest.approx(0.405)


async def test_aggressive_mode_reduces_the_gains_from_the_start() -> None:
    result, _, _ = await run(pid_feedback(aggressive=True), [7, 10])
    r2 = result.rounds[1]
    assert r2.gains == pytest.approx((0.3, 0.1, 0.075))
    assert r2.control == pytest.approx(0.12)
    assert r2.feedback is not None and "Rewrite all related code thoroughly." in r2.feedback
    assert pid_feedback(aggressive=True).name == "pid_aggressive"


async def test_a_regression_reduces_the_gains_down_to_a_floor() -> None:
    result, _, _ = await run(pid_feedback(), [6, 4, 3, 2, 1])
    gains = [r.gains for r in result.rounds[1:]]
    assert gains[0] == pytest.approx((0.6, 0.2, 0.15))  # no regression yet
    assert gains[1] == pytest.approx((0.3, 0.1, 0.075))  # V rose in round 2
    assert gains[2] == pytest.approx((0.15, 0.05, 0.0375))  # and again in round 3
    assert gains[3] == pytest.approx((0.15, 0.05, 0.0375))  # floor: 25 % of the original


async def test_interval_evaluates_every_second_round_and_the_last() -> None:
    result, model, evaluator = await run(interval(2), [4, 6, 8, 9], rounds=4)
    assert result.scores == (0.4, None, 0.8, 0.9)
    assert len(evaluator.calls) == 3 and result.evaluator_calls == 3
    r2, r3 = result.rounds[1], result.rounds[2]
    assert r2.feedback is not None and "Failing tests:" in r2.feedback
    text = model.calls[2].messages[-1].content
    assert text.startswith("Your latest code has not been tested yet.")
    # The last facts again, to keep working on; not the last action ("from scratch").
    assert "- T5: f() returned 0, expected 5" in text and "from scratch" not in text
    assert "# passes 6" in model.calls[2].messages[2].content  # on the latest code
    assert (r3.control, r3.level) == (r2.control, r2.level)
    assert interval(2).name == "pid+interval2"
    assert interval(3, self_refine()).name == "self_refine+interval3"


async def test_auto_picks_self_refine_for_an_easy_first_round() -> None:
    result, _, _ = await run(auto(), [8, 10])
    assert result.choice is not None and result.choice.startswith("self_refine")
    assert result.rounds[1].control is None


async def test_auto_picks_pid_for_correlated_bugs() -> None:
    task = CodeTask(
        name="related",
        prompt="Write f().",
        entry_point="f",
        checks=tuple(Check(f"T{i}", f"f() == {i}") for i in range(1, 11)),
        related=(("f", "g() probably has the same bug"),),
    )
    result, model, _ = await run(auto(), [5, 10], task=task)
    assert result.choice is not None and result.choice.startswith("pid_feedback")
    assert "g() probably has the same bug" in model.calls[1].messages[-1].content


def test_strategies_by_name() -> None:
    assert strategy_from_spec("blind_retry").name == "blind_retry"
    assert strategy_from_spec("self_refine").name == "self_refine"
    assert strategy_from_spec("pid").name == "pid"
    assert strategy_from_spec(" pid+interval2 ").name == "pid+interval2"
    assert strategy_from_spec("auto").name == "auto"
    for bad in ("pid+interval0", "pid+twice", "magic"):
        with pytest.raises(ConfigurationError, match="strategy"):
            strategy_from_spec(bad)


def test_bad_pid_arguments() -> None:
    with pytest.raises(ConfigurationError, match="kp"):
        pid_feedback(kp=-1.0)
    with pytest.raises(ConfigurationError, match="thresholds"):
        pid_feedback(thresholds=(0.6, 0.3))
    with pytest.raises(ConfigurationError, match="n"):
        interval(0)


async def test_pid_lists_at_most_max_failures() -> None:
    def fn(messages: tuple[Message, ...], call: CallInfo) -> str:
        return fenced("# passes 0\ndef f():\n    return 0\n")

    refiner = Refiner(
        ModelGenerator(FunctionModel(fn)),
        ScriptedEvaluator(),
        pid_feedback(max_failures=3),
        max_rounds=2,
    )
    result = await refiner.run(TASK)
    text = result.rounds[1].feedback or ""
    assert text.count("\n- T") == 3 and "- ... and 7 more" in text


async def test_pid_lists_a_few_examples_per_failure_pattern() -> None:
    from closedloop.harness import LRU_CACHE

    checks = tuple(
        CheckResult(
            name=c.name,
            passed=False,
            call=c.call,
            error="raised NameError: name 'Node' is not defined (line 5: self.head = Node())",
        )
        for c in LRU_CACHE.checks
    )
    evaluation = Evaluation(status=EvaluationStatus.FAILED, reason="0 of 10", checks=checks)

    class Fixed:
        async def __call__(self, task: CodeTask, code: str) -> Evaluation:
            return evaluation

    model = FunctionModel(lambda messages, call: fenced("class LRUCache:\n    pass\n"))
    refiner = Refiner(ModelGenerator(model), Fixed(), pid_feedback(), max_rounds=2)
    result = await refiner.run(LRU_CACHE)
    text = result.rounds[1].feedback or ""
    assert [line[:5] for line in text.splitlines() if line.startswith("- T")] == [
        "- T1:",
        "- T2:",
        "- T3:",
    ]
    assert "- ... and 7 more like these" in text
    assert "NameError at line 5 (`self.head = Node()`): T1, T2, T3" in text
    # The structural fix comes first, before the list of failures.
    assert text.splitlines()[1].startswith("Required: `Node` is used but never defined")


async def test_a_method_instead_of_a_function_gets_the_shape_to_copy() -> None:
    from .conftest import ADD_TASK

    wrapped = "class Solution:\n    def add(self, a: int, b: int) -> int:\n        return a + b\n"
    model = FunctionModel(lambda messages, call: fenced(wrapped))
    refiner = Refiner(ModelGenerator(model), strategy=pid_feedback(), max_rounds=2)
    result = await refiner.run(ADD_TASK)  # the real sandbox: "does not define 'add'"
    first = result.rounds[0].evaluation
    assert first is not None and first.status == "load_error"
    text = result.rounds[1].feedback or ""
    assert "is a method of class `Solution`" in text
    # The shape to complete comes last, where a small model looks.
    assert text.endswith(
        "Complete this top-level definition (not a method):\n"
        "```python\ndef add(a: int, b: int) -> int:\n    ...\n```"
    )


def test_skeletons_from_the_prompt_when_the_code_has_no_method() -> None:
    from closedloop.harness import LRU_CACHE, MERGE_SORTED_LISTS
    from closedloop.harness._prompts import skeleton

    assert (
        skeleton(MERGE_SORTED_LISTS, "x = 1")
        == "```python\ndef merge_two_lists(l1, l2):\n    ...\n```"
    )
    assert skeleton(LRU_CACHE, "") == "```python\nclass LRUCache:\n    ...\n```"
    he = CodeTask(
        name="he",
        prompt='Complete:\n```python\ndef inc(x: int) -> int:\n    """x + 1"""\n```',
        entry_point="inc",
        checks=(Check("A1", "candidate(1) == 2"),),
    )
    assert skeleton(he, "") == "```python\ndef inc(x: int) -> int:\n    ...\n```"
    assert skeleton(TASK, "") is None  # nothing to go on: no shape is made up


def test_a_copy_is_recognised_through_imports_docstrings_and_comments() -> None:
    from closedloop.harness._prompts import same_code

    first = 'from typing import List\n\ndef f(xs: List[int]):\n    """Doc."""\n    return xs\n'
    copy = 'def f(xs: List[int]):\n    """Reworded doc."""\n    # a new comment\n    return xs\n'
    changed = 'def f(xs: List[int]):\n    """Doc."""\n    return xs[::-1]\n'
    assert same_code(first, copy)
    assert not same_code(first, changed)
    assert same_code("not python (", "not   python (") and not same_code("a (", "b (")


async def test_the_control_signal_sets_the_sampling_temperature() -> None:
    # u = 0.24 at 70 %: low + (high - low) * u, sent with the round-2 call.
    result, model, _ = await run(pid_feedback(temperatures=(0.2, 0.8)), [7, 8])
    r2 = result.rounds[1]
    assert r2.temperature == pytest.approx(0.2 + 0.6 * 0.24)
    assert model.calls[1].temperature == pytest.approx(r2.temperature)
    assert model.calls[0].temperature == 0.0  # round 1: the generator's own
    result, model, _ = await run(pid_feedback(temperatures=(0.1, 0.5)), [0, 0])
    assert result.rounds[1].temperature == pytest.approx(0.1 + 0.4 * 0.8)


async def test_a_repeated_program_is_sampled_at_the_high_temperature() -> None:
    refiner = Refiner(
        ModelGenerator(same_answer(8)),
        ScriptedEvaluator(),
        pid_feedback(temperatures=(0.2, 0.9)),
        stop=stop_after_rounds(99),
        max_rounds=3,
    )
    result = await refiner.run(TASK)
    assert result.rounds[1].temperature == pytest.approx(0.2 + 0.7 * 0.16)
    assert result.rounds[2].temperature == pytest.approx(0.9)
    model = refiner.generator.model  # type: ignore[attr-defined]
    assert [c.temperature for c in model.calls][1:] == pytest.approx([0.312, 0.9])


async def test_without_temperatures_the_generator_keeps_its_own() -> None:
    result, model, _ = await run(pid_feedback(temperatures=None), [5, 6])
    assert result.rounds[1].temperature is None
    assert [c.temperature for c in model.calls] == [0.0, 0.0]


@pytest.mark.parametrize("bad", [(0.8, 0.2), (-0.1, 0.5), (0.2, 2.5), (0.2,), "hot", (True, 1.0)])
def test_bad_temperature_ranges_are_refused(bad: object) -> None:
    with pytest.raises(ConfigurationError, match="temperatures"):
        pid_feedback(temperatures=bad)  # type: ignore[arg-type]


async def test_blind_retry_at_its_own_temperature_is_the_open_loop_control() -> None:
    result, model, _ = await run(blind_retry(0.6), [3, 4, 5])
    assert [c.temperature for c in model.calls] == [0.0, 0.6, 0.6]
    assert all(call.messages == model.calls[0].messages for call in model.calls)
    assert [r.temperature for r in result.rounds] == [None, 0.6, 0.6]
    assert blind_retry(0.6).name == "blind_retry@0.6"
    spec = strategy_from_spec("blind_retry@0.6")
    assert spec == blind_retry(0.6) and spec.name == "blind_retry@0.6"
    assert strategy_from_spec("blind_retry@0.8+interval2").name == "blind_retry@0.8+interval2"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("blind_retry@hot", "must be a number"),
        ("blind_retry@3", "must lie in"),
        ("blind_retry@nan", "must lie in"),
        ("pid@0.5", "only blind_retry"),
    ],
)
def test_bad_blind_temperatures_are_refused(spec: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        strategy_from_spec(spec)
