"""LocalLlama on the real built-in models (SmolLM2-135M, Qwen2.5-Coder-0.5B)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from closedloop import (
    ConfigurationError,
    ContextOverflowError,
    ModelLoadError,
    ModelNotAvailableError,
    ModelTimeoutError,
    SchemaCompileError,
)
from closedloop.models import LocalLlama, ModelRequest, load_model, parse_structured

from .conftest import ROUTER_SYSTEM, WEATHER_QUESTION, WEATHER_SCHEMA

pytestmark = [pytest.mark.integration, pytest.mark.real_model]

TRUTH = {"tool": "get_weather", "city": "上海"}

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 40},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}
SENTIMENT = {
    "type": "object",
    "properties": {
        "sentiment": {"type": "string", "enum": ["positive", "negative", "neutral"]},
        # llama.cpp's grammar bounds integers but not numbers: a "number" with a maximum can
        # come back out of range (then parse_error says so); percentages stay enforceable.
        "confidence_pct": {"type": "integer", "minimum": 0, "maximum": 100},
    },
    "required": ["sentiment", "confidence_pct"],
}
TAGS = {
    "type": "object",
    "properties": {
        "tags": {
            "type": "array",
            "items": {"type": "string", "maxLength": 20},
            "minItems": 1,
            "maxItems": 3,
        }
    },
    "required": ["tags"],
}
YES_NO = {"type": "object", "properties": {"answer": {"type": "boolean"}}, "required": ["answer"]}
ORDER = {
    "type": "object",
    "properties": {
        "order": {
            "type": "object",
            "properties": {
                "item": {"type": "string", "maxLength": 30},
                "quantity": {"type": "integer", "minimum": 1, "maximum": 99},
            },
            "required": ["item", "quantity"],
        },
        "date": {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"},
    },
    "required": ["order", "date"],
}
CASES: list[tuple[dict[str, Any], str]] = [
    (WEATHER_SCHEMA, WEATHER_QUESTION),
    (WEATHER_SCHEMA, "北京明天会下雨吗？"),
    (WEATHER_SCHEMA, "What time is it in Tokyo right now?"),
    (WEATHER_SCHEMA, "Find me a flight to Paris."),
    (WEATHER_SCHEMA, "广州现在几点了？"),
    (WEATHER_SCHEMA, "Is it sunny in London?"),
    (PERSON, "Alice is 31 years old. Extract the person."),
    (PERSON, "张伟今年四十五岁。提取人物信息。"),
    (PERSON, "Bob, aged 7, likes trains."),
    (SENTIMENT, "I love this product, it works perfectly!"),
    (SENTIMENT, "The delivery was late and the box was broken."),
    (SENTIMENT, "这家餐厅还行吧。"),
    (TAGS, "Tag this article: a new battery chemistry doubles EV range."),
    (TAGS, "Give up to three tags for: 如何用PID控制器调节温度"),
    (YES_NO, "Is water wet?"),
    (YES_NO, "Is 7 an even number?"),
    (ORDER, "Order 3 apples for 2024-05-01."),
    (ORDER, "我要在2025-01-15订两本书。"),
    (ORDER, "Deliver twelve pencils on the first of March 2026."),
    (SENTIMENT, "Meh."),
]


@pytest.fixture(scope="module")
def smol(smollm2_path: Path, llama_threads: int) -> LocalLlama:
    return LocalLlama(smollm2_path, name="local:smollm2-135m", n_ctx=2048, n_threads=llama_threads)


async def test_smollm2_gives_schema_valid_json_on_twenty_of_twenty(smol: LocalLlama) -> None:
    assert len(CASES) == 20
    for schema, prompt in CASES:
        system = "Answer with JSON only." if schema is not WEATHER_SCHEMA else ROUTER_SYSTEM
        out = await smol.complete(
            [{"role": "system", "content": system}, {"role": "user", "content": prompt}],
            ModelRequest(response_schema=schema, max_tokens=128),
        )
        assert out.parse_error is None, (prompt, out.text)
        jsonschema.validate(out.parsed, schema)  # independent check of the parsed value
        assert out.finish_reason == "stop"
        if prompt == WEATHER_QUESTION:
            assert out.parsed == TRUTH


async def test_qwen_answers_the_weather_question_without_a_grammar(
    qwen_path: Path, llama_threads: int
) -> None:
    qwen = load_model("local:qwen2.5-coder-0.5b", n_ctx=2048, n_threads=llama_threads)
    out = await qwen.complete(
        [
            {"role": "system", "content": ROUTER_SYSTEM},
            {"role": "user", "content": WEATHER_QUESTION},
        ],
        ModelRequest(max_tokens=40),
    )
    parsed, error = parse_structured(out.text, WEATHER_SCHEMA, lenient=True)
    assert error is None, out.text
    assert parsed == TRUTH
    assert out.usage.completion_tokens > 0 and out.latency_s > 0
    assert qwen.usage.total.cost_usd == 0.0


async def test_same_seed_same_text_and_sampling_varies_with_the_seed(smol: LocalLlama) -> None:
    async def sample(seed: int) -> str:
        out = await smol.complete(
            "Name a colour.", ModelRequest(temperature=1.0, seed=seed, max_tokens=12)
        )
        return out.text

    assert await sample(42) == await sample(42)
    assert len({await sample(s) for s in (1, 2, 3, 4)}) > 1


async def test_concurrent_calls_are_serialised_safely(smol: LocalLlama) -> None:
    prompts = ["Say hello.", "Count to three.", "Name a fruit."]
    alone = [(await smol.complete(p, ModelRequest(max_tokens=16))).text for p in prompts]
    together = await asyncio.gather(
        *(smol.complete(p, ModelRequest(max_tokens=16)) for p in prompts)
    )
    assert [c.text for c in together] == alone


async def test_timeout_stops_generation_and_the_model_stays_usable(smol: LocalLlama) -> None:
    with pytest.raises(ModelTimeoutError, match="timeout"):
        await smol.complete(
            "Write a very long story about dragons.", ModelRequest(max_tokens=512, timeout=0.05)
        )
    out = await smol.complete(
        [
            {"role": "system", "content": ROUTER_SYSTEM},
            {"role": "user", "content": WEATHER_QUESTION},
        ],
        ModelRequest(response_schema=WEATHER_SCHEMA, max_tokens=64),
    )
    assert out.parsed == TRUTH


async def test_prompt_longer_than_the_context_is_a_clear_error(
    smollm2_path: Path, llama_threads: int
) -> None:
    small = LocalLlama(smollm2_path, n_ctx=256, n_threads=llama_threads)
    with pytest.raises(ContextOverflowError, match=r"context window is 256 \(n_ctx\)"):
        await small.complete("weather " * 400, ModelRequest(max_tokens=8))
    out = await small.complete(
        "Hi", ModelRequest(max_tokens=400)
    )  # the completion is cut at the window
    assert out.usage.prompt_tokens + out.usage.completion_tokens <= 256


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string", "pattern": "[a-z]+"},
        {"type": "object", "properties": {"a": {"$ref": "https://example.com/a.json"}}},
    ],
)
async def test_a_schema_the_grammar_compiler_rejects_is_a_schema_compile_error(
    smol: LocalLlama, schema: dict[str, Any]
) -> None:
    with pytest.raises(SchemaCompileError, match="grammar compiler rejected"):
        await smol.complete("x", ModelRequest(response_schema=schema, max_tokens=8))


async def test_missing_file_names_the_pull_command(tmp_path: Path, smollm2_path: Path) -> None:
    with pytest.raises(ModelNotAvailableError, match="no model file"):
        LocalLlama(tmp_path / "absent.gguf")
    moved = tmp_path / "soon-gone.gguf"
    moved.write_bytes(b"x")
    model = LocalLlama(moved)
    moved.unlink()
    with pytest.raises(ModelNotAvailableError, match="closedloop models pull"):
        await model.complete("x")


async def test_corrupt_gguf_is_a_load_error(tmp_path: Path) -> None:
    bad = tmp_path / "garbage.gguf"
    bad.write_bytes(b"this is not a GGUF file" * 100)
    with pytest.raises(ModelLoadError, match=r"cannot load .*garbage\.gguf.*corrupt"):
        await LocalLlama(bad, n_threads=1).complete("x")


async def test_native_tools_are_refused_locally(smol: LocalLlama) -> None:
    with pytest.raises(ConfigurationError, match="tools"):
        await smol.complete(
            "x", ModelRequest(tools=[{"type": "function", "function": {"name": "f"}}])
        )
