"""Fault profiles: the named ones, custom files (JSON and TOML), and bad files named clearly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from closedloop import ConfigurationError
from closedloop_bench.world import (
    ENDPOINTS,
    EndpointFaults,
    Outage,
    UniformLatency,
    WorldFaultProfile,
    load_profile,
    load_profile_file,
    named_profiles,
)


def test_named_profiles() -> None:
    named = named_profiles()
    assert list(named) == ["none", "seed000", "harsh", "regimes"]
    assert all(named[n].regimes is None for n in ("none", "seed000", "harsh"))
    assert named["regimes"].regimes is not None
    none = named["none"]
    for name in ENDPOINTS:
        f = none.for_endpoint(name)
        assert f.latency is None and f.error_rate == 0 and not f.outages
    seed = named["seed000"].for_endpoint("weather")
    assert seed.latency == UniformLatency(low_ms=200, high_ms=800)
    assert seed.error_rate == 0.10 and seed.error_statuses == (500, 503)
    assert seed.rate_limit_rate == seed.empty_rate == seed.drift_rate == 0
    harsh = named["harsh"].for_endpoint("payments_create")
    assert harsh.rate_limit_rate > 0 and harsh.commit_then_fail_rate > 0 and harsh.outages
    assert harsh.slow_periods and harsh.empty_rate > 0 and harsh.drift_rate > 0


def test_load_profile_by_name_object_or_path(tmp_path: Path) -> None:
    assert load_profile("seed000").name == "seed000"
    p = WorldFaultProfile(name="x")
    assert load_profile(p) is p
    f = tmp_path / "mine.json"
    f.write_text(json.dumps({"default": {"error_rate": 0.2}}))
    assert load_profile(str(f)).name == "mine"  # the file's stem when it has no name
    assert load_profile(f).default.error_rate == 0.2
    with pytest.raises(ConfigurationError, match=r"profile='nope'.*none, seed000, harsh"):
        load_profile("nope")


def test_endpoint_override_replaces_only_the_fields_it_sets() -> None:
    profile = WorldFaultProfile(
        default=EndpointFaults(latency=UniformLatency(low_ms=10, high_ms=20), error_rate=0.1),
        endpoints={"payments_create": EndpointFaults(rate_limit_rate=0.3, retry_after_s=2)},
    )
    pay = profile.for_endpoint("payments_create")
    assert pay.error_rate == 0.1 and pay.latency == UniformLatency(low_ms=10, high_ms=20)
    assert pay.rate_limit_rate == 0.3 and pay.retry_after_s == 2
    assert profile.for_endpoint("weather").rate_limit_rate == 0


def test_toml_file(tmp_path: Path) -> None:
    f = tmp_path / "flaky.toml"
    f.write_text(
        """
name = "flaky-weather"
description = "weather goes down for a while"

[default]
error_rate = 0.05
latency = { kind = "lognormal", median_ms = 300, sigma = 0.4 }

[endpoints.weather]
empty_rate = 0.2
drift_rate = 0.1
drift = { renames = { temperature_c = "temp" }, drops = ["condition"] }

[[endpoints.weather.outages]]
unit = "seconds"
start = 10
end = 20
status = 502

[[endpoints.flights.slow_periods]]
start = 5
end = 8
factor = 10
""",
        encoding="utf-8",
    )
    profile = load_profile_file(f)
    assert profile.name == "flaky-weather"
    weather = profile.for_endpoint("weather")
    assert weather.error_rate == 0.05 and weather.empty_rate == 0.2
    assert weather.outages == (Outage(unit="seconds", start=10, end=20, status=502),)
    assert weather.drift is not None and weather.drift.renames == {"temperature_c": "temp"}
    assert profile.for_endpoint("flights").slow_periods[0].factor == 10


@pytest.mark.parametrize(
    ("content", "suffix", "field"),
    [
        ({"default": {"error_rate": 1.5}}, ".json", "default.error_rate"),
        ({"endpoints": {"wether": {"error_rate": 0.1}}}, ".json", "wether"),
        ({"default": {"eror_rate": 0.1}}, ".json", "default.eror_rate"),
        ({"default": {"latency": {"kind": "gauss", "ms": 1}}}, ".json", "default.latency"),
        (
            {"default": {"latency": {"kind": "uniform", "low_ms": 9, "high_ms": 1}}},
            ".json",
            "default.latency.uniform",
        ),
        ({"default": {"error_rate": 0.6, "rate_limit_rate": 0.6}}, ".json", "sum to 1.200"),
        (
            {"default": {"error_rate": 0.6}, "endpoints": {"weather": {"empty_rate": 0.6}}},
            ".json",
            "endpoints.weather",
        ),
        ({"default": {"outages": [{"start": 5, "end": 2}]}}, ".json", "default.outages.0"),
        ({"default": {"error_statuses": [404]}}, ".json", "default.error_statuses.0"),
        ({"default": {"error_statuses": []}}, ".json", "default.error_statuses"),
        ({"default": {"retry_after_s": -1}}, ".json", "default.retry_after_s"),
    ],
)
def test_bad_profile_files_name_the_field(
    tmp_path: Path, content: dict[str, object], suffix: str, field: str
) -> None:
    f = tmp_path / f"bad{suffix}"
    f.write_text(json.dumps(content))
    with pytest.raises(ConfigurationError) as info:
        load_profile_file(f)
    assert info.value.argument == "faults_file"
    assert field in str(info.value)


@pytest.mark.parametrize(
    ("name", "text", "match"),
    [
        ("broken.json", "{not json", "not valid .json"),
        ("broken.toml", "a = = 1", "not valid .toml"),
        ("profile.yaml", "a: 1", r"\.json or \.toml"),
        ("list.json", "[1, 2]", "input should be a valid dictionary"),
    ],
)
def test_unreadable_profile_files(tmp_path: Path, name: str, text: str, match: str) -> None:
    f = tmp_path / name
    f.write_text(text)
    with pytest.raises(ConfigurationError, match=f"(?i){match}"):
        load_profile_file(f)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="cannot be read"):
        load_profile_file(tmp_path / "absent.json")


def test_profiles_are_frozen_and_strict() -> None:
    p = named_profiles()["seed000"]
    with pytest.raises(ValidationError):
        p.default.error_rate = 0.5  # type: ignore[misc]
    with pytest.raises(ValidationError):
        EndpointFaults(error_rate=0.1, bogus=1)  # type: ignore[call-arg]
    with pytest.raises(ConfigurationError, match="endpoint='nope'"):
        p.for_endpoint("nope")
