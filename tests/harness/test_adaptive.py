"""Dead-zone compensation: an intensity measured to do nothing is sent at a stronger one."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from closedloop import ConfigurationError
from closedloop.control import FeedbackIntensity
from closedloop.harness import (
    IntensityMemory,
    ModelGenerator,
    Refiner,
    pid_feedback,
    strategy_from_spec,
)
from closedloop.models import CallInfo, FunctionModel, Message

from .conftest import ScriptedEvaluator, fenced, score_task

LIGHT, MEDIUM, HEAVY = FeedbackIntensity.LIGHT, FeedbackIntensity.MEDIUM, FeedbackIntensity.HEAVY


def test_a_level_is_judged_only_after_enough_samples() -> None:
    memory = IntensityMemory(min_samples=3)
    for _ in range(2):
        memory.record(LIGHT, improved=False)
    for _ in range(3):
        memory.record(HEAVY, improved=True)
    assert memory.rate(LIGHT) is None and not memory.in_dead_zone(LIGHT)
    assert memory.compensate(LIGHT) is LIGHT
    memory.record(LIGHT, improved=False)
    assert memory.rate(LIGHT) == pytest.approx(1 / 5)
    assert memory.rate(HEAVY) == pytest.approx(4 / 5)
    assert memory.in_dead_zone(LIGHT)
    # Medium has never been tried: light's pushes go to medium first, to measure it.
    assert memory.compensate(LIGHT) is MEDIUM
    for _ in range(3):
        memory.record(MEDIUM, improved=False)
    assert memory.compensate(LIGHT) is HEAVY and memory.compensate(MEDIUM) is HEAVY
    assert memory.compensate(HEAVY) is HEAVY


def test_a_level_that_helps_is_kept() -> None:
    memory = IntensityMemory(min_samples=4)
    for improved in (True, False, True, False):
        memory.record(LIGHT, improved)
        memory.record(HEAVY, improved)
    assert not memory.in_dead_zone(LIGHT) and memory.compensate(LIGHT) is LIGHT


@given(
    light=st.lists(st.booleans(), max_size=12),
    medium=st.lists(st.booleans(), max_size=12),
    heavy=st.lists(st.booleans(), max_size=12),
)
def test_compensation_never_weakens_a_push(
    light: list[bool], medium: list[bool], heavy: list[bool]
) -> None:
    memory = IntensityMemory(min_samples=3)
    for level, outcomes in ((LIGHT, light), (MEDIUM, medium), (HEAVY, heavy)):
        for improved in outcomes:
            memory.record(level, improved)
    order = [LIGHT, MEDIUM, HEAVY]
    for level in order:
        assert order.index(memory.compensate(level)) >= order.index(level)
    assert not memory.in_dead_zone(HEAVY)


def test_bad_memory_arguments() -> None:
    with pytest.raises(ConfigurationError, match="min_samples"):
        IntensityMemory(min_samples=0)
    with pytest.raises(ConfigurationError, match="ratio"):
        IntensityMemory(ratio=0.0)
    with pytest.raises(ConfigurationError, match="ratio"):
        IntensityMemory(ratio=1.5)
    with pytest.raises(ConfigurationError, match="memory"):
        pid_feedback(memory={"light": 0})  # type: ignore[arg-type]


def copier(messages: tuple[Message, ...], call: CallInfo) -> str:
    """A generator with a dead zone: shown its code it hands it back; asked for a new
    implementation with the failing tests, it gets everything right."""
    if len(messages) > 2:
        return messages[2].content
    if "Failing tests:" in messages[1].content:
        return fenced("# passes 10\ndef f():\n    return 1\n")
    return fenced("# passes 8\ndef f():\n    return 0\n")


async def test_the_adaptive_pid_learns_to_skip_the_dead_zone() -> None:
    memory = IntensityMemory(min_samples=3)
    strategy = pid_feedback(memory=memory)
    assert strategy.name == "pid_adaptive"
    refiner = Refiner(
        ModelGenerator(FunctionModel(copier)), ScriptedEvaluator(), strategy, max_rounds=3
    )
    levels = []
    for _ in range(8):
        result = await refiner.run(score_task(10))
        assert result.best_score == 1.0
        levels.append([r.level for r in result.rounds[1:]])
    # u = 0.16 is light; the copy makes round 3 heavy, which solves it. After three such
    # tasks light is measured to do nothing: its pushes go to medium, not yet measured,
    # which does nothing either; from then on round 2 goes out heavy.
    assert levels == [["light", "heavy"]] * 3 + [["medium", "heavy"]] * 3 + [["heavy"]] * 2
    assert memory.tried == {LIGHT: 3, MEDIUM: 3, HEAVY: 8}
    assert memory.improved == {LIGHT: 0, MEDIUM: 0, HEAVY: 8}


async def test_without_memory_every_task_starts_from_the_fixed_mapping() -> None:
    refiner = Refiner(
        ModelGenerator(FunctionModel(copier)), ScriptedEvaluator(), pid_feedback(), max_rounds=3
    )
    for _ in range(5):
        result = await refiner.run(score_task(10))
        assert [r.level for r in result.rounds[1:]] == ["light", "heavy"]


def test_pid_adaptive_by_name_has_a_memory_of_its_own() -> None:
    a, b = strategy_from_spec("pid_adaptive"), strategy_from_spec("pid_adaptive")
    assert a.name == "pid_adaptive"
    assert a.memory is not None and a.memory is not b.memory  # type: ignore[attr-defined]
    assert strategy_from_spec("pid_adaptive+interval2").name == "pid_adaptive+interval2"
