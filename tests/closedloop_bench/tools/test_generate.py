"""The generated sets: sizes, balance, domains, disjoint splits, byte-identical regeneration."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from closedloop_bench.tools import DATA_DIR, FAMILIES, ToolTask, load_tool_tasks, write_data


@pytest.fixture(scope="module")
def committed() -> dict[str, list[ToolTask]]:
    return {split: load_tool_tasks(DATA_DIR / f"{split}.jsonl") for split in ("dev", "eval")}


def test_sizes_and_family_balance(committed: dict[str, list[ToolTask]]) -> None:
    assert len(committed["eval"]) >= 400
    assert len(committed["dev"]) == 100
    for split, tasks in committed.items():
        counts = Counter(t.family for t in tasks)
        assert set(counts) == set(FAMILIES)
        assert max(counts.values()) - min(counts.values()) == 0, (split, counts)
        assert all(t.split == split for t in tasks)


def test_many_domains(committed: dict[str, list[ToolTask]]) -> None:
    for tasks in committed.values():
        assert len({t.domain for t in tasks}) >= 10
    multi = [t for t in committed["eval"] if t.family == "multi_turn"]
    assert {t.env for t in multi} == {"todo", "ledger", "calendar", "inventory", "files"}


def test_splits_do_not_share_a_task(committed: dict[str, list[ToolTask]]) -> None:
    def key(task: ToolTask) -> tuple[str, ...]:
        return (*(m.content for m in task.messages), *sorted(task.functions))

    dev = {key(t) for t in committed["dev"]}
    assert not dev & {key(t) for t in committed["eval"]}


def test_choose_offers_two_to_six_and_parallel_several(
    committed: dict[str, list[ToolTask]],
) -> None:
    tasks = committed["eval"]
    choose = [len(t.tools) for t in tasks if t.family == "choose"]
    assert min(choose) == 2 and max(choose) == 6
    parallel = [len(t.expected.calls) for t in tasks if t.family == "parallel"]
    assert min(parallel) >= 2 and max(parallel) == 4
    assert all(len(t.tools) == 1 for t in tasks if t.family == "single")
    irrelevant = [t for t in tasks if t.family == "irrelevance"]
    # No offered function comes from the domain the user asks about.
    by_name = {f.function.name: t.domain for t in tasks if t.family == "single" for f in t.tools}
    assert all(by_name.get(n, "?") != t.domain for t in irrelevant for n in t.functions)


def test_regeneration_is_byte_identical(tmp_path: Path) -> None:
    paths = write_data(tmp_path)
    for split, path in paths.items():
        assert path.read_bytes() == (DATA_DIR / f"{split}.jsonl").read_bytes(), split
