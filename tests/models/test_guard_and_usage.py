"""The real-call guard and usage/cost accounting."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from closedloop import ConfigurationError, RealModelCallBlockedError
from closedloop.models import (
    Completion,
    FunctionModel,
    LocalLlama,
    OpenAICompatible,
    Price,
    RawCompletion,
    ScriptedModel,
    Usage,
    UsageMeter,
    allow_real_model_calls,
    block_real_model_calls,
    current_usage_meter,
    price_for,
    real_model_calls_allowed,
    usage_scope,
)


def test_unit_tests_run_with_real_calls_blocked() -> None:
    assert real_model_calls_allowed() is False


@pytest.mark.real_model
def test_the_real_model_marker_opts_in() -> None:
    assert real_model_calls_allowed() is True
    with block_real_model_calls():
        assert real_model_calls_allowed() is False
    assert real_model_calls_allowed() is True


async def test_a_real_local_model_is_blocked_before_it_loads(tmp_path: Path) -> None:
    gguf = tmp_path / "garbage.gguf"
    gguf.write_bytes(b"garbage: loading this would raise ModelLoadError, not the guard")
    model = LocalLlama(gguf, n_threads=1)
    with pytest.raises(RealModelCallBlockedError, match="real_model"):
        await model.complete("hi")


async def test_a_real_server_model_is_blocked_before_it_connects() -> None:
    model = OpenAICompatible("http://127.0.0.1:9/v1", "m")
    with pytest.raises(RealModelCallBlockedError):
        await model.complete("hi")
    await model.aclose()


async def test_test_models_are_never_blocked() -> None:
    assert (await FunctionModel(lambda m, c: "ok").complete("x")).text == "ok"


def test_allow_context_manager_restores_the_previous_state() -> None:
    with allow_real_model_calls():
        assert real_model_calls_allowed()
        with allow_real_model_calls(False):
            assert not real_model_calls_allowed()
        assert real_model_calls_allowed()
    assert not real_model_calls_allowed()


def test_price_table_lookup() -> None:
    assert price_for("gpt-4o-mini") == Price(0.15, 0.60)
    assert price_for("gpt-4o-mini-2024-07-18") == Price(0.15, 0.60)
    assert price_for("gpt-4o-2024-08-06") == Price(2.50, 10.00)
    assert price_for("mystery-model") is None
    assert Price(1.0, 2.0).cost(Usage(prompt_tokens=1_000_000, completion_tokens=500_000)) == 2.0
    with pytest.raises(ConfigurationError, match="input_per_mtok"):
        Price(-1.0, 0.0)


def _answer(prompt: int, completion: int) -> RawCompletion:
    return RawCompletion(text="x", prompt_tokens=prompt, completion_tokens=completion)


async def test_usage_accumulates_per_model_and_prices_calls() -> None:
    model = ScriptedModel([_answer(100, 10), _answer(200, 20)], price=Price(1.0, 10.0))
    first = await model.complete("a")
    await model.complete("b")
    assert first.cost_usd == pytest.approx((100 * 1.0 + 10 * 10.0) / 1e6)
    total = model.usage.total
    assert (total.calls, total.prompt_tokens, total.completion_tokens) == (2, 300, 30)
    assert total.total_tokens == 330
    assert total.cost_usd == pytest.approx((300 + 300) / 1e6)
    assert total.unpriced_calls == 0


async def test_unpriced_models_are_counted_not_guessed() -> None:
    model = ScriptedModel([_answer(5, 5)], price=None)
    out = await model.complete("a")
    assert out.cost_usd is None
    assert model.usage.total.unpriced_calls == 1
    assert model.usage.total.cost_usd == 0.0


async def test_usage_scope_collects_one_run_across_models_and_tasks() -> None:
    a = ScriptedModel([_answer(1, 2)] * 3, name="a")
    b = ScriptedModel([_answer(10, 20)] * 3, name="b")
    outside = ScriptedModel([_answer(1000, 1000)], name="outside")
    await outside.complete("not in the run")
    with usage_scope() as run:
        assert current_usage_meter() is run
        await asyncio.gather(a.complete("1"), b.complete("2"), a.complete("3"))
    assert current_usage_meter() is None
    snap = run.snapshot()
    assert snap.total.calls == 3
    assert snap.total.prompt_tokens == 12 and snap.total.completion_tokens == 24
    assert snap.by_model["a"].calls == 2 and snap.by_model["b"].calls == 1
    assert "outside" not in snap.by_model
    assert a.usage.total.calls == 2  # each model keeps its own tally too


async def test_errors_are_counted() -> None:
    model = ScriptedModel([RuntimeError("boom"), _answer(1, 1)])
    meter = UsageMeter()
    with usage_scope(meter), pytest.raises(RuntimeError):
        await model.complete("x")
    assert meter.total.errors == 1 and meter.total.calls == 0


def test_meter_reset_and_repr() -> None:
    meter = UsageMeter()
    meter.record(Completion(text="t", model="m", call_id="c", usage=Usage(prompt_tokens=3)))
    assert "calls=1" in repr(meter)
    meter.reset()
    assert meter.total.calls == 0
