"""The refinement loop: best-so-far, stop reasons, failed model calls, shared first rounds."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from closedloop import ConfigurationError, ModelError, ModelTimeoutError
from closedloop.harness import (
    CheckResult,
    CodeTask,
    EvaluationStatus,
    ModelGenerator,
    RefinementResult,
    Refiner,
    StopReason,
    pid_feedback,
    self_refine,
    stop_after_rounds,
)
from closedloop.models import FunctionModel, ScriptedModel

from .conftest import ScriptedEvaluator, fenced, score_task, script_answers

TASK = score_task(10)


def refiner(passes: Sequence[int], **kwargs: object) -> tuple[Refiner, FunctionModel]:
    model = FunctionModel(script_answers(list(passes)))
    options: dict[str, object] = {"max_rounds": len(passes), **kwargs}
    return Refiner(ModelGenerator(model), ScriptedEvaluator(), **options), model  # type: ignore[arg-type]


@settings(max_examples=60)
@given(passes=st.lists(st.integers(0, 10), min_size=1, max_size=6), pid=st.booleans())
def test_the_returned_output_is_never_worse_than_the_best_round(
    passes: list[int], pid: bool
) -> None:
    strategy = pid_feedback() if pid else self_refine()
    r, _ = refiner(passes, strategy=strategy, stop=stop_after_rounds(99))
    result = r.run_sync(TASK)
    best = max(passes) / 10
    assert result.best_score == best
    assert result.best_round == passes.index(max(passes)) + 1  # the earliest best round
    assert f"# passes {max(passes)}" in result.best_code
    assert not result.returned_regressed
    drops = sum(1 for a, b in itertools.pairwise(passes) if b < a)
    assert result.regressions == drops


async def test_stops_when_the_target_is_met() -> None:
    r, model = refiner([6, 10, 3, 3])
    result = await r.run(TASK)
    assert result.stop_reason == StopReason.TARGET_MET
    assert len(result.rounds) == 2 and len(model.calls) == 2
    assert result.rounds_to_target == 2 and result.trajectory == "converged"


async def test_lyapunov_stop_returns_the_best_round_not_the_last() -> None:
    r, _ = refiner([8, 6, 4, 9, 9])
    result = await r.run(TASK)
    assert result.stop_reason == StopReason.LYAPUNOV
    assert result.scores == (0.8, 0.6, 0.4)
    assert (result.best_round, result.best_score) == (1, 0.8)
    assert [r.dV for r in result.rounds][1:] == pytest.approx([0.06, 0.1])
    assert result.trajectory == "diverging"


async def test_max_rounds_is_a_backstop() -> None:
    r, _ = refiner([1, 2, 3], stop=stop_after_rounds(99))
    result = await r.run(TASK)
    assert result.stop_reason == StopReason.MAX_ROUNDS
    assert result.stop_detail == "all 3 rounds run"


async def test_a_failed_model_call_is_a_failed_round_and_the_loop_goes_on() -> None:
    model = ScriptedModel(
        [
            fenced("# passes 3\ndef f():\n    return 0\n"),
            ModelTimeoutError("generation ran past 5 s"),
            fenced("# passes 10\ndef f():\n    return 0\n"),
        ]
    )
    r = Refiner(ModelGenerator(model), ScriptedEvaluator(), self_refine(), max_rounds=3)
    result = await r.run(TASK)
    failed = result.rounds[1]
    assert failed.error == "ModelTimeoutError: generation ran past 5 s"
    assert failed.evaluation is not None
    assert failed.evaluation.status is EvaluationStatus.NO_CODE
    assert failed.evaluation.reason.startswith("the model call failed: ModelTimeoutError")
    assert result.scores == (0.3, 0.0, 1.0)
    assert result.best_round == 3


async def test_each_round_gets_its_own_seed() -> None:
    r, model = refiner([1, 2, 3], seed=5, stop=stop_after_rounds(99))
    result = await r.run(TASK)
    assert [c.seed for c in model.calls] == [5, 6, 7]
    assert [rd.seed for rd in result.rounds] == [5, 6, 7]
    r, model = refiner([1, 2], seed=None, stop=stop_after_rounds(99))
    await r.run(TASK)
    assert [c.seed for c in model.calls] == [None, None]


async def test_a_shared_first_round_is_not_generated_again() -> None:
    r, model = refiner([4, 10, 10])
    first = await r.first_round(TASK)
    assert len(model.calls) == 1
    for strategy in (self_refine(), pid_feedback()):
        other, other_model = refiner([10, 10], strategy=strategy)
        result = await other.run(TASK, first=first)
        assert result.rounds[0].code == first.code
        assert result.scores == (0.4, 1.0)
        assert len(other_model.calls) == 1  # round 2 only
    with pytest.raises(ConfigurationError, match="first"):
        await r.run(TASK, first=first.model_copy(update={"index": 2}))


async def test_the_diagnoser_reading_goes_into_pid_feedback() -> None:
    seen: list[tuple[str, int]] = []

    async def diagnoser(task: CodeTask, code: str, failures: Sequence[CheckResult]) -> str:
        seen.append((task.name, len(failures)))
        return "f() ignores its input."

    r, model = refiner([7, 10], strategy=pid_feedback(), diagnoser=diagnoser)
    await r.run(TASK)
    assert seen == [("score10", 3)]
    assert "A reviewer's reading: f() ignores its input." in model.calls[1].messages[-1].content


async def test_a_failing_diagnoser_does_not_stop_the_run() -> None:
    async def diagnoser(task: CodeTask, code: str, failures: Sequence[CheckResult]) -> str:
        raise ModelError("down")

    r, model = refiner([7, 10], strategy=pid_feedback(), diagnoser=diagnoser)
    result = await r.run(TASK)
    assert result.best_score == 1.0
    assert "reviewer" not in model.calls[1].messages[-1].content


async def test_round_timing_uses_the_injected_clock() -> None:
    ticks = iter(range(100))
    r, _ = refiner([10], clock=lambda: float(next(ticks)))
    result = await r.run(TASK)
    rnd = result.rounds[0]
    assert (rnd.generation_s, rnd.evaluation_s) == (1.0, 1.0)


async def test_results_round_trip_through_json() -> None:
    r, _ = refiner([6, 9, 10], strategy=pid_feedback())
    result = await r.run(TASK)
    again = RefinementResult.model_validate_json(result.model_dump_json())
    assert again == result
    assert again.rounds[1].control == pytest.approx(0.32)


def test_bad_refiner_arguments() -> None:
    gen = ModelGenerator(ScriptedModel([]))
    with pytest.raises(ConfigurationError, match="max_rounds"):
        Refiner(gen, max_rounds=0)
    with pytest.raises(ConfigurationError, match="target"):
        Refiner(gen, target=1.5)
    with pytest.raises(ConfigurationError, match="seed"):
        Refiner(gen, seed=-1)
    with pytest.raises(ConfigurationError, match="generator"):
        Refiner("nope")  # type: ignore[arg-type]


def _same_program(passed: int) -> FunctionModel:
    return FunctionModel(
        lambda messages, call: fenced(f"# passes {passed}\ndef f():\n    return 0\n")
    )


async def test_self_refine_stops_at_a_fixed_point() -> None:
    # Shown its code and told "improve it", the model hands the same program back: round 3
    # would send the same feedback on the same program, so the default stop ends at round 2.
    model = _same_program(6)
    r = Refiner(ModelGenerator(model), ScriptedEvaluator(), self_refine(), max_rounds=4)
    result = await r.run(TASK)
    assert result.stop_reason == StopReason.FIXED_POINT
    assert result.scores == (0.6, 0.6) and len(model.calls) == 2
    assert "round 2" in result.stop_detail


async def test_a_strategy_that_reacts_to_the_repeat_is_not_at_a_fixed_point() -> None:
    # PID feedback escalates after the repeat (new text, new temperature): the loop moves.
    model = _same_program(8)
    r = Refiner(ModelGenerator(model), ScriptedEvaluator(), pid_feedback(), max_rounds=3)
    result = await r.run(TASK)
    assert result.stop_reason != StopReason.FIXED_POINT
    assert [rd.level for rd in result.rounds[1:]] == ["light", "heavy"]
    assert len(model.calls) == 3


async def test_a_changed_program_is_no_fixed_point() -> None:
    r, model = refiner([6, 6, 6, 6])  # the same score, a different program each round
    result = await r.run(TASK)
    assert result.stop_reason != StopReason.FIXED_POINT
    assert len(model.calls) >= 3
