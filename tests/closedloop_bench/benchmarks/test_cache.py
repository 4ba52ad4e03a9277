"""The completion cache: hits and misses by exact prompt and parameters, temperature 0 only,
kept on disk across instances, and identical calls in flight coalesced."""

from __future__ import annotations

import asyncio
from pathlib import Path

from closedloop.models import CallInfo, FunctionModel, Message, ModelRequest
from closedloop_bench.benchmarks import CachingModel, CompletionCache, cache_key, default_cache_path


def counting() -> tuple[FunctionModel, list[str]]:
    seen: list[str] = []

    def answer(messages: tuple[Message, ...], call: CallInfo) -> str:
        seen.append(messages[-1].content)
        return f"reply to {messages[-1].content} (max {call.max_tokens})"

    return FunctionModel(answer, name="counting"), seen


async def test_a_repeated_call_is_a_hit_and_other_parameters_miss(tmp_path: Path) -> None:
    inner, seen = counting()
    model = CachingModel(inner, CompletionCache(tmp_path / "c.sqlite"))
    first = await model.complete("hello", ModelRequest(max_tokens=32))
    again = await model.complete("hello", ModelRequest(max_tokens=32))
    assert again.text == first.text and again.call_id != first.call_id
    assert again.latency_s == first.latency_s  # charged what it cost when made
    await model.complete("hello", ModelRequest(max_tokens=64))
    await model.complete("hello", ModelRequest(max_tokens=32, seed=3))
    await model.complete("other", ModelRequest(max_tokens=32))
    assert seen == ["hello", "hello", "hello", "other"]
    assert model.stats.as_dict() == {"hits": 1, "misses": 4, "coalesced": 0, "uncacheable": 0}


async def test_sampling_above_temperature_zero_is_never_cached(tmp_path: Path) -> None:
    inner, seen = counting()
    model = CachingModel(inner, CompletionCache(tmp_path / "c.sqlite"))
    for _ in range(3):
        await model.complete("hot", ModelRequest(temperature=0.7))
    assert len(seen) == 3 and model.stats.uncacheable == 3
    assert len(model.cache) == 0


async def test_entries_survive_a_new_cache_on_the_same_file(tmp_path: Path) -> None:
    path = tmp_path / "cache" / "c.sqlite"
    inner, seen = counting()
    await CachingModel(inner, CompletionCache(path)).complete("persist me")
    reopened = CachingModel(inner, CompletionCache(path))
    completion = await reopened.complete("persist me")
    assert completion.text.startswith("reply to persist me")
    assert seen == ["persist me"] and reopened.stats.hits == 1


async def test_identical_calls_in_flight_are_made_once() -> None:
    gate = asyncio.Event()
    calls: list[int] = []

    async def slow(messages: tuple[Message, ...], call: CallInfo) -> str:
        calls.append(1)
        await gate.wait()
        return "shared"

    model = CachingModel(FunctionModel(slow), CompletionCache(":memory:"))
    waiting = [asyncio.create_task(model.complete("same")) for _ in range(3)]
    await asyncio.sleep(0)
    gate.set()
    results = await asyncio.gather(*waiting)
    assert [r.text for r in results] == ["shared"] * 3
    assert calls == [1] and model.stats.coalesced == 2 and model.stats.misses == 1


def test_the_key_covers_messages_and_parameters(closedloop_home: Path) -> None:
    base = cache_key("m", "hi", max_tokens=8, seed=0)
    assert base == cache_key("m", [{"role": "user", "content": "hi"}], max_tokens=8, seed=0)
    assert base != cache_key("m", "hi", max_tokens=9, seed=0)
    assert base != cache_key("other", "hi", max_tokens=8, seed=0)
    assert default_cache_path() == closedloop_home / "cache" / "completions.sqlite"


async def test_a_waiter_outlives_the_cancelled_caller_it_was_waiting_for() -> None:
    release = asyncio.Event()
    calls: list[int] = []

    async def slow(messages: tuple[Message, ...], call: CallInfo) -> str:
        calls.append(1)
        await release.wait()
        return "made by the second caller"

    model = CachingModel(FunctionModel(slow), CompletionCache(":memory:"))
    leader = asyncio.create_task(model.complete("same"))
    await asyncio.sleep(0)
    follower = asyncio.create_task(model.complete("same"))
    await asyncio.sleep(0)
    leader.cancel()  # e.g. the loop's deadline cut the first episode's call off
    await asyncio.sleep(0)
    release.set()
    assert (await follower).text == "made by the second caller"
    assert leader.cancelled() and calls == [1, 1]
