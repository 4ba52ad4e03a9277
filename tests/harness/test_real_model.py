"""The harness on the real local model (Qwen2.5-Coder-0.5B-Instruct): two tasks, two rounds."""

from __future__ import annotations

import pytest

from closedloop.harness import (
    LRU_CACHE,
    MERGE_SORTED_LISTS,
    EvaluationStatus,
    ModelGenerator,
    Refiner,
    pid_feedback,
)
from closedloop.models import builtin_model_path, load_model

MODEL = "qwen2.5-coder-0.5b"


@pytest.mark.integration
@pytest.mark.real_model
@pytest.mark.timeout(1800)  # four generations; about 2 minutes on 2 idle cores
async def test_pid_refinement_with_the_local_model(llama_threads: int) -> None:
    path = builtin_model_path(MODEL)
    if not path.is_file():
        pytest.fail(f"{path} is missing: run `closedloop models pull {MODEL}` first")
    generator = ModelGenerator(
        load_model(f"local:{MODEL}", n_threads=llama_threads), temperature=0.0, max_tokens=400
    )
    refiner = Refiner(generator, strategy=pid_feedback(), max_rounds=2)
    ran_checks = 0
    for task in (MERGE_SORTED_LISTS, LRU_CACHE):
        result = await refiner.run(task)
        print(
            task.name, result.scores, [r.evaluation.reason for r in result.rounds if r.evaluation]
        )
        for rnd in result.rounds:
            assert rnd.completion_tokens > 0 and rnd.code.strip()
            assert rnd.evaluation is not None and rnd.evaluation.reason
            if rnd.evaluation.status in (EvaluationStatus.PASSED, EvaluationStatus.FAILED):
                ran_checks += 1
        scores = [r.score for r in result.rounds if r.score is not None]
        assert result.best_score == max(scores) and not result.returned_regressed
        if len(result.rounds) == 2:
            second = result.rounds[1]
            assert second.feedback is not None and second.control is not None
            assert second.level in ("light", "medium", "heavy")
            # Whatever went wrong in round 1 is named in the feedback.
            first = result.rounds[0].evaluation
            assert first is not None
            assert first.failures[0].name in second.feedback or first.reason in second.feedback
        else:
            assert result.stop_reason == "target_met"
    # The model's answers come out of their fences as Python the sandbox can run.
    assert ran_checks >= 1
