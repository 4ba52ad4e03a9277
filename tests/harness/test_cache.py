"""The persistent generation cache: a real SQLite file that survives the process."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from closedloop import ConfigurationError
from closedloop.harness import (
    SPIRAL_MATRIX,
    BenchConfig,
    Generation,
    GenerationCache,
    ModelGenerator,
    run_refine_bench,
)
from closedloop.models import CallInfo, FunctionModel, Message

from . import solutions
from .conftest import fenced

MSGS = (Message(role="user", content="write f"),)


def gen(text: str = "```python\nx = 1\n```", **kw: object) -> Generation:
    fields: dict[str, object] = {
        "code": "x = 1\n",
        "text": text,
        "prompt_tokens": 12,
        "completion_tokens": 7,
        "latency_s": 1.25,
        "finish_reason": "length",
        **kw,
    }
    return Generation(**fields)  # type: ignore[arg-type]


def test_a_generation_survives_closing_and_reopening_the_file(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "gens.sqlite"
    cache = GenerationCache(path)
    cache["k1"] = gen()
    cache["k2"] = gen(text="other", code="y = 2\n")
    cache.close()
    assert path.is_file()
    again = GenerationCache(path)
    assert len(again) == 2 and sorted(again) == ["k1", "k2"]
    assert again["k1"] == gen()
    assert again["k2"].text == "other" and again["k2"].code == "y = 2\n"
    # What is stored is plain SQLite: one row per key.
    rows = sqlite3.connect(path).execute("SELECT key FROM generations ORDER BY key").fetchall()
    assert rows == [("k1",), ("k2",)]
    again.close()


def test_a_hit_is_not_marked_cached_in_storage(tmp_path: Path) -> None:
    cache = GenerationCache(tmp_path / "c.sqlite")
    cache["k"] = gen(cached=True)
    assert cache["k"].cached is False  # ModelGenerator marks the hits it serves itself
    cache.close()


def test_replace_delete_and_missing_keys(tmp_path: Path) -> None:
    cache = GenerationCache(tmp_path / "c.sqlite")
    cache["k"] = gen(text="first")
    cache["k"] = gen(text="second")
    assert len(cache) == 1 and cache["k"].text == "second"
    assert "k" in cache and "nope" not in cache
    del cache["k"]
    assert len(cache) == 0
    with pytest.raises(KeyError):
        cache["k"]
    with pytest.raises(KeyError):
        del cache["k"]
    cache.close()


def test_an_unusable_path_is_a_configuration_error(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(ConfigurationError, match="path"):
        GenerationCache(blocker / "gens.sqlite")
    with pytest.raises(ConfigurationError, match="cannot open the cache"):
        GenerationCache(tmp_path)  # a directory, not a file


@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    text=st.text(alphabet=st.characters(blacklist_categories=("Cs",))),
    tokens=st.integers(min_value=0, max_value=10**6),
    latency=st.floats(min_value=0.0, max_value=1e4, allow_nan=False),
)
def test_any_text_round_trips(tmp_path: Path, text: str, tokens: int, latency: float) -> None:
    cache = GenerationCache(tmp_path / "h.sqlite")
    value = gen(text=text, code=text, completion_tokens=tokens, latency_s=latency)
    cache["key"] = value
    assert cache["key"] == value
    cache.close()


async def test_a_second_generator_on_the_same_file_makes_no_model_call(tmp_path: Path) -> None:
    path = tmp_path / "gens.sqlite"
    answers = iter(["```python\ndef f():\n    return 1\n```", "```python\ndef f(): pass\n```"])

    def fn(messages: tuple[Message, ...], call: CallInfo) -> str:
        return next(answers)

    first_model = FunctionModel(fn)
    first = ModelGenerator(first_model, temperature=0.2, cache=GenerationCache(path))
    made = await first(MSGS, seed=3, entry_point="f")
    assert made.cached is False and len(first_model.calls) == 1

    second_model = FunctionModel(fn)
    second = ModelGenerator(second_model, temperature=0.2, cache=GenerationCache(path))
    hit = await second(MSGS, seed=3, entry_point="f")
    assert second_model.calls == [] and second.cache_hits == 1
    assert (hit.cached, hit.text, hit.code) == (True, made.text, made.code)
    # Another seed is another request: the model is called.
    other = await second(MSGS, seed=4, entry_point="f")
    assert len(second_model.calls) == 1 and other.code == "def f(): pass\n"


@pytest.mark.integration
async def test_a_rerun_of_the_bench_on_the_same_cache_calls_no_model(tmp_path: Path) -> None:
    def answer(messages: tuple[Message, ...], call: CallInfo) -> str:
        precise = len(messages) > 2 or "Failing tests:" in messages[-1].content
        bad = "def spiral_order(m):\n    return [x for r in m for x in r]\n"
        return fenced(solutions.SPIRAL if precise else bad)

    config = BenchConfig(
        rounds=2,
        strategies=("blind_retry", "pid"),
        loopgain=False,
        cache_path=tmp_path / "gens.sqlite",
    )
    first_model = FunctionModel(answer)
    first = await run_refine_bench(config, model=first_model, tasks=[SPIRAL_MATRIX])
    assert first.model_calls == len(first_model.calls) > 0
    second_model = FunctionModel(answer)
    second = await run_refine_bench(config, model=second_model, tasks=[SPIRAL_MATRIX])
    assert second_model.calls == [] and second.model_calls == 0
    for strategy in ("blind_retry", "pid"):
        assert second.pass_rate_by_round(strategy) == first.pass_rate_by_round(strategy)
    assert second.pass_rate_by_round("pid") == pytest.approx([0.4, 1.0])
