"""Refinement tasks: reference solutions pass every check; known bugs fail the right checks."""

from __future__ import annotations

import pytest

from closedloop import ConfigurationError
from closedloop.harness import (
    LRU_CACHE,
    MERGE_SORTED_LISTS,
    SEED_TASKS,
    SPIRAL_MATRIX,
    TTL_CACHE,
    Check,
    CodeTask,
    EvaluationStatus,
    Sandbox,
)

from . import solutions

pytestmark = pytest.mark.integration


def test_task_names_and_check_counts() -> None:
    assert [t.name for t in SEED_TASKS] == [
        "merge_sorted_lists",
        "spiral_matrix",
        "lru_cache",
        "ttl_cache",
    ]
    assert [len(t.checks) for t in SEED_TASKS] == [5, 10, 10, 10]


@pytest.mark.parametrize("task", SEED_TASKS, ids=lambda t: t.name)
async def test_reference_solutions_pass_every_check(sandbox: Sandbox, task: CodeTask) -> None:
    ev = await sandbox.run(task, solutions.SOLUTIONS[task.name])
    assert ev.status is EvaluationStatus.PASSED, [c.describe() for c in ev.failures]


async def test_lru_without_recency_in_get_fails_t3_t7_t10(sandbox: Sandbox) -> None:
    ev = await sandbox.run(LRU_CACHE, solutions.LRU_GET_NO_REFRESH)
    assert ev.passed == 7
    assert [c.name for c in ev.failures] == ["T3", "T7", "T10"]
    assert [(c.got, c.expected) for c in ev.failures] == [("2", "-1"), ("3", "-1"), ("1", "-1")]


async def test_lru_evicting_the_newest_fails_more(sandbox: Sandbox) -> None:
    ev = await sandbox.run(LRU_CACHE, solutions.LRU_WRONG_END)
    assert ev.passed == 4


async def test_lru_put_without_recency_fails_the_update_checks(sandbox: Sandbox) -> None:
    code = solutions.LRU.replace(
        "        if key in self.data:\n            self.data.move_to_end(key)\n", ""
    )
    ev = await sandbox.run(LRU_CACHE, code)
    assert [c.name for c in ev.failures] == ["T6"]


async def test_ttl_checks_use_the_injected_clock(sandbox: Sandbox) -> None:
    # Reads time.monotonic instead of the injected clock: expiry never happens in the checks.
    code = solutions.TTL.replace("self.clock()", "time.monotonic()")
    ev = await sandbox.run(TTL_CACHE, code)
    assert {"T2", "T3"} <= {c.name for c in ev.failures}


async def test_ttl_boundary_is_exclusive(sandbox: Sandbox) -> None:
    code = solutions.TTL.replace("self.clock() >= item[1]", "self.clock() > item[1]")
    ev = await sandbox.run(TTL_CACHE, code)
    assert [c.name for c in ev.failures] == ["T3"]


async def test_spiral_that_flattens_rows_fails_most(sandbox: Sandbox) -> None:
    ev = await sandbox.run(
        SPIRAL_MATRIX, "def spiral_order(m):\n    return [x for r in m for x in r]\n"
    )
    assert {c.name for c in ev.checks if c.passed} == {"T4", "T5", "T6", "T7"}


async def test_merge_that_mutates_nothing_but_drops_a_list(sandbox: Sandbox) -> None:
    ev = await sandbox.run(MERGE_SORTED_LISTS, "def merge_two_lists(a, b):\n    return a\n")
    assert {c.name for c in ev.checks if c.passed} == {"T2", "T5"}


def test_check_call_text() -> None:
    assert Check("T", "f(1) == 2").call == "f(1)"
    assert (
        Check("T", "c.get(2) == -1", setup="c = C()\nc.put(1)").call
        == "c = C(); c.put(1); c.get(2)"
    )
    assert Check("T", "f(1) < 2").call == "f(1) < 2"


def test_bad_tasks_and_checks_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="test"):
        Check("T", "f(1) ==")
    with pytest.raises(ConfigurationError, match="name"):
        Check("", "f() == 1")
    with pytest.raises(ConfigurationError, match="checks"):
        CodeTask(name="x", prompt="p", entry_point="f", checks=())
    with pytest.raises(ConfigurationError, match="unique"):
        CodeTask(name="x", prompt="p", entry_point="f", checks=(Check("A", "1"), Check("A", "2")))
    with pytest.raises(ConfigurationError, match="entry_point"):
        CodeTask(name="x", prompt="p", entry_point="not an identifier", checks=(Check("A", "1"),))
    with pytest.raises(ConfigurationError, match="no such check"):
        LRU_CACHE.check("T99")
