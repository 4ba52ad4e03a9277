"""The public surface of closedloop_bench.reference: a new public name is a decision."""

from __future__ import annotations

import closedloop_bench.reference as reference

EXPECTED = {
    "ANSWER_FIELD", "CHECKERS", "DOMAIN_TOOLS", "READS", "SPLIT_SEEDS", "Answer",
    "CheckerVerdict", "Checker", "CityMatch", "CityNormaliser", "CityRule", "Domain", "OrderItem",
    "ReadSpec", "Split", "ReferenceTask", "TrajectoryCall", "ToolCallRecord", "WorldTools", "answer_schema",
    "check", "ideal_model", "load_tasks", "observed_value", "play_ideal", "resolve_arguments",
    "task_counts", "describe_world_tasks", "load_world_tasks", "verify_world_tasks",
}  # fmt: skip


def _isort_key(name: str) -> tuple[int, str]:
    # ruff's RUF022 order: CONSTANTS, then Classes, then functions, each alphabetical.
    kind = 0 if name.isupper() else 1 if name[0].isupper() else 2
    return kind, name


def test_all_is_sorted_and_pinned() -> None:
    assert reference.__all__ == sorted(reference.__all__, key=_isort_key)
    assert set(reference.__all__) == EXPECTED


def test_public_classes_and_functions_show_the_public_module() -> None:
    for name in reference.__all__:
        obj = getattr(reference, name)
        if isinstance(obj, type) or (callable(obj) and hasattr(obj, "__code__")):
            assert obj.__module__ == "closedloop_bench.reference", name
            assert obj.__doc__, name
