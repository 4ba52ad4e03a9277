"""Confidence sensors: decision-token masks, logprob summaries, sample agreement, and the
logprobs an OpenAI-compatible server sends (a fake server on loopback)."""

from __future__ import annotations

from pathlib import Path

import pytest

from closedloop.models import ModelRequest, OpenAICompatible
from closedloop.models._confidence import (
    TokenLogprob,
    agreement_of,
    decision_mask,
    logprob_confidence,
    mark_decisions,
    quantile,
    value_spans,
)

from .conftest import FakeOpenAI


def test_value_spans_keep_values_and_drop_keys_and_punctuation() -> None:
    text = '{"tool": "add", "arguments": {"a": 12, "b": -3.5, "ok": true}}'
    assert [text[a:b] for a, b in value_spans(text)] == ["add", "12", "-3.5", "true"]


def test_value_spans_of_a_truncated_reply() -> None:
    assert [t[a:b] for t in ['{"tool": "wea'] for a, b in value_spans(t)] == ["wea"]


def test_decision_mask_marks_tokens_overlapping_a_value() -> None:
    pieces = ['{"', "tool", '":', ' "', "get", "_weather", '"}']
    assert decision_mask(pieces) == [False, False, False, False, True, True, False]


def test_logprob_summaries_use_only_decision_tokens() -> None:
    tokens = [
        TokenLogprob(token="{", logprob=-9.0, decision=False),
        TokenLogprob(token="a", logprob=-1.0),
        TokenLogprob(token="b", logprob=-3.0),
    ]
    conf = logprob_confidence(tokens)
    assert conf.decision_tokens == 2
    assert conf.logprob_mean == pytest.approx(-2.0)
    assert conf.logprob_min == -3.0
    assert conf.logprob_low == pytest.approx(-2.8)


def test_no_decision_token_leaves_the_summaries_unset() -> None:
    conf = logprob_confidence(mark_decisions([("{", -0.1), ("}", -0.2)]))
    assert conf.decision_tokens == 0 and conf.logprob_mean is None


def test_quantile_interpolates_and_refuses_nothing() -> None:
    assert quantile([0.0, 10.0], 0.25) == 2.5
    with pytest.raises(ValueError, match="no values"):
        quantile([], 0.5)


def test_agreement_and_margin_count_invalid_samples_against_every_call() -> None:
    assert agreement_of(["a", "a", "b", None]) == (0.5, 0.25)
    assert agreement_of(["a", "a", "a"]) == (1.0, 1.0)
    assert agreement_of([None, None]) == (0.0, 0.0)


@pytest.mark.real_model  # a real HTTP server, though not a real model
async def test_openai_logprobs_are_asked_for_and_summarised(fake_openai: FakeOpenAI) -> None:
    model = OpenAICompatible(fake_openai.base_url, "logprobs", api_key="k")
    try:
        out = await model.complete("hi", ModelRequest(logprobs=True))
        plain = await model.complete("hi", ModelRequest())
    finally:
        await model.aclose()
    sent = fake_openai.requests[-2]
    assert sent["logprobs"] is True and sent["top_logprobs"] == 5
    assert "logprobs" not in fake_openai.requests[-1]
    assert [t.token for t in out.logprobs if t.decision] == ["get", "_weather"]
    assert out.confidence is not None
    assert out.confidence.logprob_min == pytest.approx(-0.9)
    assert out.confidence.logprob_mean == pytest.approx(-0.6)
    assert plain.logprobs == () and plain.confidence is None


@pytest.mark.real_model  # a real HTTP server, though not a real model
async def test_a_server_that_refuses_logprobs_is_not_asked_again(fake_openai: FakeOpenAI) -> None:
    model = OpenAICompatible(fake_openai.base_url, "nologprobs", api_key="k")
    try:
        assert model.supports_logprobs is True  # until the server says otherwise
        out = await model.complete("hi", ModelRequest(logprobs=True))
        again = await model.complete("hi", ModelRequest(logprobs=True))
    finally:
        await model.aclose()
    # The refused request, then the same request without logprobs, then one request.
    assert ["logprobs" in r for r in fake_openai.requests[-3:]] == [True, False, False]
    assert out.text and out.confidence is None and again.confidence is None
    assert model.supports_logprobs is False


def test_which_models_give_logprobs(smollm2_path: Path) -> None:
    from closedloop.models import LocalLlama, ScriptedModel, WrapperModel

    local = LocalLlama(smollm2_path)  # not loaded: nothing runs
    assert local.supports_logprobs is True
    scripted = ScriptedModel(["{}"])
    assert scripted.supports_logprobs is False
    assert WrapperModel(local).supports_logprobs is True
