"""FaultInjectingModel's bursts: slow, truncated and malformed replies that come in runs."""

from __future__ import annotations

import itertools
import json
import statistics

import pytest
from pydantic import ValidationError

from closedloop import ModelTimeoutError, TransientModelError
from closedloop.models import (
    FAULT_PROFILES,
    Completion,
    FaultInjectingModel,
    FaultKind,
    FaultProfile,
    FunctionModel,
    ModelRequest,
)

from .conftest import WEATHER_SCHEMA

TRUTH = {"tool": "get_weather", "city": "上海"}


async def no_sleep(seconds: float) -> None:
    return None


def model(profile: FaultProfile, seed: int = 0) -> FaultInjectingModel:
    inner = FunctionModel(lambda m, c: json.dumps(TRUTH, ensure_ascii=False), name="inner")
    return FaultInjectingModel(inner, profile, seed, sleep=no_sleep)


async def calls(m: FaultInjectingModel, n: int, timeout: float | None = None) -> list[object]:
    out: list[object] = []
    for _ in range(n):
        try:
            out.append(
                await m.complete(
                    "上海天气？", ModelRequest(response_schema=WEATHER_SCHEMA, timeout=timeout)
                )
            )
        except (TransientModelError, ModelTimeoutError) as exc:
            out.append(exc)
    return out


def burst_calls(m: FaultInjectingModel) -> list[int]:
    return sorted({r.call_index for r in m.fault_log if "burst" in r.details})


async def test_bursts_come_in_runs_with_the_mean_length() -> None:
    m = model(FaultProfile(burst_rate=0.05, burst_length=4.0))
    await calls(m, 4000)
    hit = burst_calls(m)
    counter = itertools.count()
    runs = [len(list(g)) for _, g in itertools.groupby(hit, key=lambda i: i - next(counter))]
    assert m.bursts > 100
    assert len(hit) / m.bursts == pytest.approx(4.0, rel=0.15)  # calls per burst
    # Back-to-back bursts merge into one run, so runs are at least as long as bursts.
    assert statistics.fmean(runs) >= 3.5


async def test_a_truncated_burst_cuts_the_reply_and_says_so() -> None:
    m = model(FaultProfile(burst_rate=0.2, burst_kinds=(FaultKind.TRUNCATE,)))
    out = await calls(m, 50)
    cut = {r.call_index for r in m.fault_log if r.kind is FaultKind.TRUNCATE}
    assert cut
    for i in cut:
        reply = out[i]
        assert isinstance(reply, Completion)
        assert reply.finish_reason == "length" and reply.parsed is None
        assert len(reply.text) < len(json.dumps(TRUTH, ensure_ascii=False))


async def test_a_malformed_burst_never_parses() -> None:
    m = model(FaultProfile(burst_rate=0.2, burst_kinds=(FaultKind.MALFORMED,)))
    out = await calls(m, 50)
    bad = {r.call_index for r in m.fault_log if r.kind is FaultKind.MALFORMED}
    assert bad
    for i in bad:
        reply = out[i]
        assert isinstance(reply, Completion) and reply.parsed is None
        with pytest.raises(ValueError):
            json.loads(reply.text)
    good = [o for i, o in enumerate(out) if i not in bad]
    assert all(isinstance(o, Completion) and o.parsed == TRUTH for o in good)


async def test_a_slow_burst_runs_past_a_timeout() -> None:
    m = model(FaultProfile(burst_rate=0.2, burst_kinds=(FaultKind.SLOW,), burst_latency_s=3.0))
    out = await calls(m, 60, timeout=2.0)
    slow = {r.call_index for r in m.fault_log if r.kind is FaultKind.SLOW}
    assert slow
    assert all(isinstance(out[i], ModelTimeoutError) for i in slow)
    assert not any(isinstance(o, ModelTimeoutError) for i, o in enumerate(out) if i not in slow)


async def test_bursts_leave_the_other_faults_as_they_were() -> None:
    base = FAULT_PROFILES["seed000"]
    plain, bursty = model(base, 3), model(base.model_copy(update={"burst_rate": 0.0}), 3)
    await calls(plain, 200)
    await calls(bursty, 200)
    assert plain.fault_log == bursty.fault_log
    with_bursts = model(base.model_copy(update={"burst_rate": 0.1}), 3)
    await calls(with_bursts, 200)
    # A burst can change what else happens to its own call (a truncated reply has no
    # field to hallucinate); every call outside the bursts meets exactly the same faults.
    hit = set(burst_calls(with_bursts))
    assert hit
    assert [(r.call_index, r.kind) for r in with_bursts.fault_log if r.call_index not in hit] == [
        (r.call_index, r.kind) for r in plain.fault_log if r.call_index not in hit
    ]


async def test_the_same_seed_gives_the_same_bursts() -> None:
    profile = FaultProfile(burst_rate=0.1)
    a, b, c = model(profile, 5), model(profile, 5), model(profile, 6)
    for m in (a, b, c):
        await calls(m, 200)
    assert burst_calls(a) == burst_calls(b) != burst_calls(c)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("burst_rate", 1.5),
        ("burst_rate", -0.1),
        ("burst_length", 0.0),
        ("burst_length", -3.0),
        ("burst_kinds", (FaultKind.HALLUCINATION,)),
        ("burst_latency_s", -1.0),
    ],
)
def test_bad_burst_settings_are_refused_naming_the_value(field: str, value: object) -> None:
    with pytest.raises(ValidationError) as info:
        FaultProfile(**{field: value})  # type: ignore[arg-type]
    assert field in str(info.value)
    if isinstance(value, float):
        assert str(value) in str(info.value)
