"""The logprob sensor on the real embedded SmolLM2: logprobs come back, each <= 0, with the
tool name among the decision tokens, and asking for them leaves the answer unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest

from closedloop.models import LocalLlama, ModelRequest

from .conftest import WEATHER_QUESTION, WEATHER_SCHEMA

pytestmark = [pytest.mark.integration, pytest.mark.real_model]


async def test_smollm2_logprobs_are_non_positive_and_mark_the_values(smollm2_path: Path) -> None:
    model = LocalLlama(smollm2_path, n_threads=2)
    request = ModelRequest(response_schema=WEATHER_SCHEMA, max_tokens=40, logprobs=True)
    sensed = await model.complete(WEATHER_QUESTION, request)
    plain = await model.complete(
        WEATHER_QUESTION, ModelRequest(response_schema=WEATHER_SCHEMA, max_tokens=40)
    )
    assert sensed.logprobs, "no logprobs came back"
    assert all(t.logprob <= 0.0 for t in sensed.logprobs)
    assert "".join(t.token for t in sensed.logprobs) == sensed.text
    assert sensed.confidence is not None and sensed.confidence.decision_tokens >= 1
    assert sensed.confidence.logprob_min is not None and sensed.confidence.logprob_min <= 0.0
    assert sensed.text == plain.text and plain.logprobs == ()
