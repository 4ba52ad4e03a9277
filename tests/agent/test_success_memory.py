"""The memory of past successes: one listing per step type per run, then writes only."""

from __future__ import annotations

import itertools
from typing import Any

from closedloop.agent._protocols import SuccessMemory
from closedloop.feedback import MemoryStore


class CountingMemory(MemoryStore):
    """A memory store that counts its reads."""

    def __init__(self) -> None:
        ticks = itertools.count(1)
        super().__init__(clock=lambda: float(next(ticks)))
        self.reads: list[str] = []

    async def record_get(self, namespace: str, key: str) -> Any:
        self.reads.append("get")
        return await super().record_get(namespace, key)

    async def record_list(self, namespace: str, prefix: str = "") -> Any:
        self.reads.append("list")
        return await super().record_list(namespace, prefix)


async def _remember(memory: SuccessMemory, step_type: str, n: int) -> None:
    await memory.remember(step_type, run_id="r", task="t", arguments={"n": n}, observed=f"{n}")


async def test_one_listing_per_step_type_and_the_oldest_go_first() -> None:
    store = CountingMemory()
    memory = SuccessMemory(store, per_type=3)
    for n in range(6):
        await _remember(memory, "work", n)
    await _remember(memory, "work", 5)  # a known success: no new key
    await _remember(memory, "other", 0)
    assert store.reads == ["list", "list"]
    kept = await store.record_list("successes", "work/")
    assert sorted(r.value["arguments"]["n"] for r in kept) == [3, 4, 5]


async def test_a_later_run_sees_and_trims_what_earlier_runs_left() -> None:
    store = CountingMemory()
    first = SuccessMemory(store, per_type=3)
    for n in range(3):
        await _remember(first, "work", n)
    second = SuccessMemory(store, per_type=3)
    await _remember(second, "work", 9)
    kept = await store.record_list("successes", "work/")
    assert sorted(r.value["arguments"]["n"] for r in kept) == [1, 2, 9]
