"""FaultInjectingModel: statistics match the profile, faults are logged, runs are reproducible."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from pydantic import ValidationError

from closedloop import ConfigurationError, ModelTimeoutError, TransientModelError
from closedloop.models import (
    DRIFT_KINDS,
    FAULT_PROFILES,
    CallInfo,
    Completion,
    FaultInjectingModel,
    FaultKind,
    FaultProfile,
    FunctionModel,
    Message,
    ModelRequest,
)

from .conftest import WEATHER_SCHEMA

TRUTH = {"tool": "get_weather", "city": "上海"}
N = 2000


class FakeSleep:
    """Records requested sleeps; returns at once."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


def weather_model() -> FunctionModel:
    return FunctionModel(lambda m, c: json.dumps(TRUTH, ensure_ascii=False), name="inner")


def within_4_sigma(count: int, n: int, p: float) -> bool:
    return abs(count - n * p) <= 4 * math.sqrt(n * p * (1 - p)) + 1


async def run(model: FaultInjectingModel, n: int) -> list[Completion | Exception]:
    out: list[Completion | Exception] = []
    for _ in range(n):
        try:
            out.append(
                await model.complete("上海天气？", ModelRequest(response_schema=WEATHER_SCHEMA))
            )
        except (TransientModelError, ModelTimeoutError) as exc:
            out.append(exc)
    return out


async def test_seed000_statistics_match_the_profile() -> None:
    sleep = FakeSleep()
    model = FaultInjectingModel(weather_model(), "seed000", seed=1, sleep=sleep)
    profile = FAULT_PROFILES["seed000"]
    results = await run(model, N)
    counts = model.counts()

    errors = sum(isinstance(r, TransientModelError) for r in results)
    assert errors == counts[FaultKind.TRANSIENT_ERROR]
    assert within_4_sigma(errors, N, profile.transient_error_rate)

    latencies = [r.details["latency_s"] for r in model.fault_log if r.kind is FaultKind.LATENCY]
    assert len(latencies) == N and sleep.calls == latencies
    assert all(0.2 <= x <= 0.8 for x in latencies)
    sigma_mean = 0.6 / math.sqrt(12) / math.sqrt(N)
    assert abs(sum(latencies) / N - 0.5) <= 4 * sigma_mean

    ok = N - errors
    drifts = sum(counts[k] for k in DRIFT_KINDS)
    assert within_4_sigma(drifts, ok, profile.format_drift_rate)
    assert within_4_sigma(counts[FaultKind.HALLUCINATION], ok, profile.hallucination_rate)


async def test_harsh_profile_spreads_drift_over_every_kind() -> None:
    model = FaultInjectingModel(weather_model(), "harsh", seed=2, sleep=FakeSleep())
    await run(model, N)
    counts = model.counts()
    drifted = sum(counts[k] for k in DRIFT_KINDS)
    for kind in DRIFT_KINDS:
        assert within_4_sigma(counts[kind], drifted, 1 / len(DRIFT_KINDS)), (kind, counts)


async def test_every_corrupted_answer_is_in_the_fault_log_and_vice_versa() -> None:
    model = FaultInjectingModel(weather_model(), "harsh", seed=3, sleep=FakeSleep())
    results = await run(model, 600)
    content_faults = {FaultKind.HALLUCINATION, *DRIFT_KINDS}
    logged = {r.call_id for r in model.fault_log if r.kind in content_faults}
    for result in results:
        if isinstance(result, Exception):
            continue
        corrupted = result.parsed != TRUTH
        assert corrupted == (result.call_id in logged), (result, model.faults_for(result.call_id))
        if corrupted:
            assert result.parse_error is not None or result.parsed != TRUTH


async def test_fault_details_describe_what_was_done() -> None:
    model = FaultInjectingModel(weather_model(), "harsh", seed=4, sleep=FakeSleep())
    results = {r.call_id: r for r in await run(model, 400) if isinstance(r, Completion)}
    seen: set[FaultKind] = set()
    for record in model.fault_log:
        result = results.get(record.call_id)
        if result is None:
            continue
        seen.add(record.kind)
        if record.kind is FaultKind.CODE_FENCE:
            assert result.text.startswith("```json")
        elif record.kind is FaultKind.PROSE_WRAP:
            assert result.text.startswith("Sure!")
        elif record.kind is FaultKind.TRUNCATE:
            assert result.finish_reason == "length"
            assert record.details["kept_chars"] < record.details["original_chars"]
        elif record.kind is FaultKind.DROP_FIELD:
            assert record.details["field"] not in json.loads(result.text)
        elif record.kind is FaultKind.RENAME_FIELD:
            assert record.details["renamed_to"] in json.loads(result.text)
        elif record.kind is FaultKind.HALLUCINATION:
            assert record.details["original"] == TRUTH[record.details["field"]]
            assert record.details["injected"] != record.details["original"]
    assert seen >= {FaultKind.LATENCY, FaultKind.HALLUCINATION, *DRIFT_KINDS}


async def _trace(seed: int) -> list[Any]:
    model = FaultInjectingModel(weather_model(), "harsh", seed=seed, sleep=FakeSleep())
    results = await run(model, 200)
    texts = [r.text if isinstance(r, Completion) else type(r).__name__ for r in results]
    return [texts, [r.to_dict() for r in model.fault_log]]


async def test_same_seed_same_faults_different_seed_different_faults() -> None:
    assert await _trace(7) == await _trace(7)
    assert await _trace(7) != await _trace(8)


async def test_latency_past_the_timeout_becomes_a_timeout() -> None:
    inner = weather_model()
    sleep = FakeSleep()
    profile = FaultProfile(latency_s=(0.5, 0.5))
    model = FaultInjectingModel(inner, profile, sleep=sleep)
    with pytest.raises(ModelTimeoutError, match=r"0\.3s timeout"):
        await model.complete("q", ModelRequest(timeout=0.3))
    assert sleep.calls == [0.3]
    assert [r.kind for r in model.fault_log] == [FaultKind.TIMEOUT]
    assert inner.calls == []


async def test_the_inner_model_gets_the_time_left_and_latency_is_reported() -> None:
    seen: list[CallInfo] = []

    def fn(messages: tuple[Message, ...], call: CallInfo) -> str:
        seen.append(call)
        return "ok"

    model = FaultInjectingModel(
        FunctionModel(fn), FaultProfile(latency_s=(0.25, 0.25)), sleep=FakeSleep()
    )
    out = await model.complete("q", ModelRequest(timeout=1.0, call_id="abc"))
    assert seen[0].timeout == pytest.approx(0.75)
    assert seen[0].call_id == "abc" == out.call_id
    assert out.latency_s >= 0.25


async def test_structural_drift_on_free_text_falls_back_to_prose() -> None:
    profile = FaultProfile(format_drift_rate=1.0, drift_kinds=(FaultKind.DROP_FIELD,))
    model = FaultInjectingModel(FunctionModel(lambda m, c: "plain words"), profile)
    out = await model.complete("q")
    assert out.text.startswith("Sure!") and "plain words" in out.text
    assert [r.kind for r in model.fault_log] == [FaultKind.PROSE_WRAP]


async def test_profile_none_changes_nothing() -> None:
    model = FaultInjectingModel(weather_model(), "none", sleep=FakeSleep())
    results = await run(model, 50)
    assert all(isinstance(r, Completion) and r.parsed == TRUTH for r in results)
    assert model.fault_log == ()
    assert model.calls == 50


def test_profiles_validate_their_fields() -> None:
    with pytest.raises(ValidationError):
        FaultProfile(transient_error_rate=1.5)
    with pytest.raises(ValidationError):
        FaultProfile(latency_s=(0.8, 0.2))
    with pytest.raises(ValidationError):
        FaultProfile(latency_s=(0.0, float("inf")))
    with pytest.raises(ValidationError):
        FaultProfile(drift_kinds=(FaultKind.TIMEOUT,))
    with pytest.raises(ValidationError):
        FaultProfile(drift_kinds=())
    with pytest.raises(ConfigurationError, match="known: none, seed000, harsh"):
        FaultProfile.named("gentle")
    with pytest.raises(ConfigurationError, match="inner"):
        FaultInjectingModel("model", "none")  # type: ignore[arg-type]
    assert FaultProfile.named("seed000").latency_s == (0.2, 0.8)
    harsh = FAULT_PROFILES["harsh"]
    assert FaultProfile.model_validate_json(harsh.model_dump_json()) == harsh
