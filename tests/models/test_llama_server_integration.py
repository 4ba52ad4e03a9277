"""OpenAICompatible against a real llama-cpp-python server (``llama_cpp.server``) on loopback."""

from __future__ import annotations

import pytest

from closedloop import ContextOverflowError, ModelAuthError
from closedloop.models import ModelRequest, OpenAICompatible, load_model

from .conftest import ROUTER_SYSTEM, WEATHER_QUESTION, WEATHER_SCHEMA, LlamaServer

pytestmark = [pytest.mark.integration, pytest.mark.real_model]

TRUTH = {"tool": "get_weather", "city": "上海"}


async def test_plain_and_schema_calls_through_the_server(llama_server: LlamaServer) -> None:
    model = load_model(
        f"openai-compatible:{llama_server.base_url}#smollm2", api_key=llama_server.api_key
    )
    assert isinstance(model, OpenAICompatible)
    try:
        plain = await model.complete("Say hello.", ModelRequest(max_tokens=8))
        assert plain.text and plain.usage.completion_tokens > 0
        assert plain.finish_reason in ("stop", "length")

        routed = await model.complete(
            [
                {"role": "system", "content": ROUTER_SYSTEM},
                {"role": "user", "content": WEATHER_QUESTION},
            ],
            ModelRequest(response_schema=WEATHER_SCHEMA, max_tokens=64),
        )
        # llama-cpp-python's server refuses the json_schema form and takes json_object+schema,
        # which it compiles to a grammar.
        assert model.structured_output == "json_object_schema"
        assert routed.parsed == TRUTH, routed.text
        assert model.usage.total.calls == 2 and model.usage.total.unpriced_calls == 2
    finally:
        await model.aclose()


async def test_wrong_key_is_an_auth_error(llama_server: LlamaServer) -> None:
    model = OpenAICompatible(llama_server.base_url, "smollm2", api_key="wrong")
    try:
        with pytest.raises(ModelAuthError, match="401"):
            await model.complete("hi", ModelRequest(max_tokens=4))
    finally:
        await model.aclose()


async def test_prompt_past_the_server_context_is_an_overflow(llama_server: LlamaServer) -> None:
    model = OpenAICompatible(llama_server.base_url, "smollm2", api_key=llama_server.api_key)
    try:
        with pytest.raises(ContextOverflowError, match="context"):
            await model.complete("weather " * 3000, ModelRequest(max_tokens=8))
    finally:
        await model.aclose()
