"""Disturbances with memory: per-service regimes, their effects on requests, their ground truth."""

from __future__ import annotations

import itertools
import json
import statistics
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from closedloop import ConfigurationError
from closedloop_bench.world import (
    SERVICES,
    EndpointFaults,
    FaultPlanner,
    FixedLatency,
    Regime,
    RegimeSpec,
    WorldFaultKind,
    WorldFaultProfile,
    load_profile,
    load_profile_file,
    named_profiles,
    with_onset_rate,
)
from closedloop_bench.world._regimes import RegimeChain

from ._support import Connect, MakeWorld


def chain(seed: int = 1, **spec: Any) -> RegimeChain:
    return RegimeChain(RegimeSpec(**spec), seed)


def test_spells_tile_the_horizon_start_healthy_and_follow_the_chain() -> None:
    spells = chain(horizon=5000, onset_rate=0.1).spells("weather")
    assert spells[0].regime is Regime.HEALTHY and spells[0].start == 0
    assert spells[-1].end == 5000
    for a, b in itertools.pairwise(spells):
        assert a.end == b.start and a.end > a.start
        assert a.regime is not b.regime
        if a.regime in (Regime.DOWN, Regime.STORM):
            assert b.regime is Regime.HEALTHY
        if a.regime is Regime.DEGRADED:
            assert b.regime in (Regime.HEALTHY, Regime.DOWN)


def test_the_same_seed_gives_the_same_regimes_and_services_differ() -> None:
    assert chain(7).spells("flights") == chain(7).spells("flights")
    assert chain(7).spells("flights") != chain(8).spells("flights")
    assert chain(7).spells("flights") != chain(7).spells("weather")


def test_dwell_times_and_the_onset_rate_hold_on_average() -> None:
    dwell = {Regime.DEGRADED: 6.0, Regime.DOWN: 3.0, Regime.STORM: 4.0}
    spells = chain(horizon=400_000, onset_rate=0.1, dwell=dwell).spells("shop")
    for regime, mean in [*dwell.items(), (Regime.HEALTHY, 10.0)]:
        lengths = [s.end - s.start for s in spells[:-1] if s.regime is regime]
        assert len(lengths) > 500, regime
        assert statistics.fmean(lengths) == pytest.approx(mean, rel=0.08), regime


def test_no_onsets_at_a_zero_rate() -> None:
    spells = chain(onset_rate=0.0, horizon=300).spells("rooms")
    assert [(s.regime, s.start, s.end) for s in spells] == [(Regime.HEALTHY, 0, 300)]


def _planner(seed: int = 3, **spec: Any) -> FaultPlanner:
    profile = WorldFaultProfile(
        name="t",
        default=EndpointFaults(latency=FixedLatency(ms=100.0)),
        regimes=RegimeSpec(**spec),
    )
    return FaultPlanner(profile, seed)


def _first(planner: FaultPlanner, service: str, regime: Regime, length: int = 2) -> Any:
    assert planner.regimes is not None
    return next(
        s
        for s in planner.regimes.spells(service)
        if s.regime is regime and s.end - s.start >= length
    )


def test_down_and_storm_answer_every_request_of_the_spell() -> None:
    planner = _planner(onset_rate=0.2, down_retry_after_s=5.0, storm_retry_after_s=2.0)
    down = _first(planner, "weather", Regime.DOWN)
    storm = _first(planner, "weather", Regime.STORM)
    for i in range(down.start, down.end):
        plan = planner.plan("weather", i, 0.0, i)
        assert (plan.outcome, plan.status, plan.retry_after_s) == (WorldFaultKind.OUTAGE, 503, 5.0)
    for i in range(storm.start, storm.end):
        plan = planner.plan("weather", i, 0.0, i)
        assert (plan.outcome, plan.status, plan.retry_after_s) == (
            WorldFaultKind.RATE_LIMIT,
            429,
            2.0,
        )
    after = planner.plan("weather", storm.end, 0.0, storm.end)
    assert after.regime is Regime.HEALTHY and after.outcome is None


def test_a_degraded_spell_ramps_its_latency() -> None:
    planner = _planner(onset_rate=0.2, latency_ramp=5.0, degraded_error_rate=0.0)
    spell = _first(planner, "flights", Regime.DEGRADED, length=4)
    latencies = [
        planner.plan("flights", i, 0.0, i).latency_s for i in range(spell.start, spell.end)
    ]
    assert latencies[0] == pytest.approx(0.1)
    assert latencies == sorted(latencies) and latencies[-1] > 2 * latencies[0]
    assert all(planner.plan("flights", i, 0.0, i).slow for i in range(spell.start + 1, spell.end))


def test_a_degraded_spell_raises_the_error_rate() -> None:
    planner = _planner(onset_rate=0.3, degraded_error_rate=0.5)
    assert planner.regimes is not None
    hits = total = 0
    for spell in planner.regimes.spells("documents"):
        if spell.regime is Regime.DEGRADED:
            for i in range(spell.start, spell.end):
                total += 1
                hits += planner.plan("documents", i, 0.0, i).outcome is WorldFaultKind.ERROR
    assert total > 1000 and 0.45 < hits / total < 0.55


def test_schema_drift_starts_mid_episode_and_stays_on_reads_only() -> None:
    planner = _planner(onset_rate=0.0, drift_from=5)
    reads = [planner.plan("bookings_get", i, 0.0, i).outcome for i in range(12)]
    assert reads == [None] * 5 + [WorldFaultKind.DRIFT] * 7
    effects = [planner.plan("bookings_create", i, 0.0, i).outcome for i in range(12)]
    assert effects == [None] * 12


def test_without_regimes_the_service_index_changes_nothing() -> None:
    planner = FaultPlanner(named_profiles()["harsh"], 11)
    assert planner.regimes is None
    assert [planner.plan("weather", i, 0.0, 3 * i) for i in range(60)] == [
        planner.plan("weather", i) for i in range(60)
    ]


def test_regimes_never_shift_the_ordinary_fault_stream() -> None:
    plain = FaultPlanner(named_profiles()["seed000"], 5)
    with_regimes = FaultPlanner(with_onset_rate(named_profiles()["seed000"], 0.0), 5)
    assert [with_regimes.plan("flights", i, 0.0, i).outcome for i in range(80)] == [
        plain.plan("flights", i).outcome for i in range(80)
    ]


def test_every_endpoint_belongs_to_a_service() -> None:
    assert {"bookings", "payments", "shop", "rooms"} <= set(SERVICES.values())


async def test_the_world_logs_every_regime_change_it_served(
    make_world: MakeWorld, connect: Connect
) -> None:
    profile = with_onset_rate(named_profiles()["regimes"], 0.3)
    world = make_world(profile, fault_seed=4)
    async with connect(world) as c:
        statuses = [
            (await c.get("/weather", params={"city": "北京"})).status_code for _ in range(60)
        ]
    changes = world.regime_changes()
    assert changes and all(ch.service == "weather" for ch in changes)
    assert changes[0].from_regime is Regime.HEALTHY and changes[0].onset
    for a, b in itertools.pairwise(changes):
        assert a.to_regime is b.from_regime and a.index < b.index
    assert world.planner.regimes is not None
    spells = world.planner.regimes.spells("weather")
    expected = [(s.start, s.regime) for s in spells[1:] if s.start < 60]
    assert [(ch.index, ch.to_regime) for ch in changes] == expected
    for ch in changes:
        if ch.to_regime is Regime.DOWN:
            assert statuses[ch.index] == 503
        if ch.to_regime is Regime.STORM:
            assert statuses[ch.index] == 429
    world.reset()
    assert world.regime_changes() == ()


# --- refused before anything runs, naming the value ----------------------------------


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ({"onset_rate": 1.5}, "1.5"),
        ({"onset_rate": -0.1}, "-0.1"),
        ({"dwell": {"degraded": 0.0, "down": 3.0, "storm": 3.0}}, "dwell.degraded"),
        ({"dwell": {"degraded": -2.0, "down": 3.0, "storm": 3.0}}, "-2.0"),
        ({"dwell": {"degraded": 6.0, "storm": 3.0}}, "down"),
        ({"onset_mix": {"degraded": -1.0}}, "-1.0"),
    ],
)
def test_a_regime_table_that_cannot_hold_is_refused(spec: dict[str, Any], needle: str) -> None:
    with pytest.raises(ValidationError) as info:
        RegimeSpec(**spec)
    assert needle in str(info.value)


def test_a_profile_file_with_a_bad_rate_names_the_field_and_value(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"regimes": {"onset_rate": 2.0}}))
    with pytest.raises(ConfigurationError) as info:
        load_profile_file(path)
    assert "regimes.onset_rate" in str(info.value) and "2.0" in str(info.value)


@pytest.mark.parametrize("bad", [1.01, -0.5, float("nan"), True, "0.2"])
def test_a_sweep_point_outside_the_unit_interval_is_refused(bad: object) -> None:
    with pytest.raises(ConfigurationError) as info:
        with_onset_rate(named_profiles()["seed000"], bad)  # type: ignore[arg-type]
    assert info.value.argument == "onset_rate"


def test_an_unknown_profile_is_refused_by_name() -> None:
    with pytest.raises(ConfigurationError) as info:
        load_profile("stormy")
    assert info.value.argument == "profile" and "stormy" in str(info.value)
