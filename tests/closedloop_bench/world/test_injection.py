"""Fault injection: statistics match the profile, sequences are deterministic, windows and
slow periods hold, and every fault is logged under the request id the client saw."""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest

from closedloop_bench.world import (
    DriftSpec,
    EndpointFaults,
    FaultPlanner,
    FixedLatency,
    Outage,
    SlowPeriod,
    World,
    WorldFaultKind,
    WorldFaultProfile,
    named_profiles,
)

from ._support import Connect, FakeClock, MakeWorld, RecordingSleep

TOMORROW = "2025-06-03"


def _within(observed: int, n: int, p: float, sigmas: float = 4.5) -> bool:
    """|observed/n - p| within ``sigmas`` binomial standard errors (deterministic here)."""
    return abs(observed / n - p) <= sigmas * math.sqrt(p * (1 - p) / n) + 1e-12


def test_planner_rates_match_the_harsh_profile() -> None:
    planner = FaultPlanner(named_profiles()["harsh"], seed=11)
    f = planner.faults("weather")
    n = 20_000
    plans = [planner.plan("weather", i + 100) for i in range(n)]  # past the outage window
    kinds = Counter(p.outcome for p in plans)
    assert _within(kinds[WorldFaultKind.RATE_LIMIT], n, f.rate_limit_rate)
    assert _within(kinds[WorldFaultKind.ERROR], n, f.error_rate)
    assert _within(kinds[WorldFaultKind.EMPTY], n, f.empty_rate)
    assert _within(kinds[WorldFaultKind.DRIFT], n, f.drift_rate)
    assert kinds[WorldFaultKind.COMMIT_THEN_FAIL] == 0  # reads cannot commit anything
    latencies = sorted(p.latency_s for p in plans)
    assert abs(latencies[n // 2] - 0.350) < 0.02  # the log-normal's median
    assert max(latencies) <= 8.0
    statuses = Counter(p.status for p in plans if p.outcome is WorldFaultKind.ERROR)
    assert set(statuses) == {500, 502, 503}
    pay = [planner.plan("payments_create", i + 100) for i in range(n)]
    pay_kinds = Counter(p.outcome for p in pay)
    assert _within(pay_kinds[WorldFaultKind.COMMIT_THEN_FAIL], n, 0.04)
    assert pay_kinds[WorldFaultKind.EMPTY] == pay_kinds[WorldFaultKind.DRIFT] == 0


async def test_seed000_statistics_over_http(
    make_world: MakeWorld, connect: Connect, sleeps: RecordingSleep
) -> None:
    world = make_world("seed000")
    n = 1500
    seen_status: Counter[int] = Counter()
    async with connect(world) as c:
        for _ in range(n):
            r = await c.get("/cities")
            seen_status[r.status_code] += 1
    errors = world.fault_log(kind=WorldFaultKind.ERROR)
    assert len(errors) == seen_status[500] + seen_status[503]
    assert set(seen_status) <= {200, 500, 503}
    assert _within(len(errors), n, 0.10)
    assert _within(seen_status[503], len(errors), 0.5)
    latency = [e.latency_s for e in world.fault_log(kind=WorldFaultKind.LATENCY)]
    assert len(latency) == n
    assert all(e is not None and 0.2 <= e <= 0.8 for e in latency)
    mean = sum(x for x in latency if x is not None) / n
    assert abs(mean - 0.5) < 4.5 * (0.6 / math.sqrt(12)) / math.sqrt(n)
    assert sleeps.calls == []  # latency_scale=0: no sleeping
    counts = Counter(e.kind for e in world.fault_log())
    assert set(counts) == {WorldFaultKind.LATENCY, WorldFaultKind.ERROR}


async def test_harsh_statistics_over_http(make_world: MakeWorld, connect: Connect) -> None:
    world = make_world("harsh")
    n = 1200
    async with connect(world) as c:
        responses = [await c.get("/weather", params={"city": "上海"}) for _ in range(n)]
    by_index = {e.index: e for e in world.fault_log(endpoint="weather") if e.kind != "latency"}
    # The outage window: requests 40-49 of the endpoint.
    assert [i for i, e in by_index.items() if e.kind == WorldFaultKind.OUTAGE] == list(
        range(40, 50)
    )
    rest = n - 10
    kinds = Counter(e.kind for e in by_index.values())
    assert _within(kinds[WorldFaultKind.RATE_LIMIT], rest, 0.05)
    assert _within(kinds[WorldFaultKind.ERROR], rest, 0.08)
    assert _within(kinds[WorldFaultKind.EMPTY], rest, 0.04)
    assert _within(kinds[WorldFaultKind.DRIFT], rest, 0.04)
    for i, r in enumerate(responses):
        event = by_index.get(i)
        if event is not None:
            assert r.headers["x-request-id"] == event.request_id
        if event is None:
            assert r.status_code == 200 and "temperature_c" in r.json()
        elif event.kind == WorldFaultKind.RATE_LIMIT:
            assert r.status_code == 429 and r.headers["retry-after"] == "0"  # scaled by 0
        elif event.kind in (WorldFaultKind.ERROR, WorldFaultKind.OUTAGE):
            assert r.status_code == event.status and r.status_code >= 500
        elif event.kind == WorldFaultKind.EMPTY:
            assert r.status_code == 200 and r.json() == {"city": "上海", "date": "2025-06-02"}
        else:
            assert event.kind == WorldFaultKind.DRIFT
            assert "temp_c" in r.json() and "temperature_c" not in r.json()
            assert event.detail == "temperature_c->temp_c, -humidity_pct"


def _signature(world: World) -> list[tuple[object, ...]]:
    return [(e.endpoint, e.index, e.kind, e.status, e.latency_s) for e in world.fault_log()]


async def _drive(world: World, connect: Connect, order: list[str]) -> None:
    requests = {
        "weather": ("/weather", {"city": "北京"}),
        "flights": ("/flights", {"from": "北京", "to": "上海", "date": TOMORROW}),
        "documents": ("/documents", {"company": "HCT"}),
    }
    async with connect(world) as c:
        for name in order:
            path, params = requests[name]
            await c.get(path, params=params)


async def test_same_seed_same_fault_sequence(make_world: MakeWorld, connect: Connect) -> None:
    order = ["weather", "flights", "documents"] * 60
    a, b, other = make_world("harsh"), make_world("harsh"), make_world("harsh", fault_seed=99)
    for w in (a, b, other):
        await _drive(w, connect, order)
    assert _signature(a) == _signature(b)
    assert [e.request_id for e in a.fault_log()] == [e.request_id for e in b.fault_log()]
    assert _signature(a) != _signature(other)


@pytest.mark.parametrize("shuffle_seed", [1, 2, 3])
async def test_interleaving_across_endpoints_does_not_change_outcomes(
    make_world: MakeWorld, connect: Connect, shuffle_seed: int
) -> None:
    order = ["weather", "flights", "documents"] * 40
    shuffled = list(order)
    random.Random(shuffle_seed).shuffle(shuffled)
    a, b = make_world("harsh"), make_world("harsh")
    await _drive(a, connect, order)
    await _drive(b, connect, shuffled)
    assert sorted(_signature(a), key=str) == sorted(_signature(b), key=str)


async def test_logged_faults_are_what_the_planner_says(
    make_world: MakeWorld, connect: Connect
) -> None:
    world = make_world("harsh")
    await _drive(world, connect, ["weather"] * 80)
    for event in world.fault_log(endpoint="weather"):
        plan = world.planner.plan("weather", event.index)
        if event.kind == WorldFaultKind.LATENCY:
            assert event.latency_s == plan.latency_s
        else:
            assert event.kind == plan.outcome


def _profile(**endpoints: EndpointFaults) -> WorldFaultProfile:
    return WorldFaultProfile(name="test", endpoints=endpoints)


async def test_request_count_outage_window(make_world: MakeWorld, connect: Connect) -> None:
    world = make_world(_profile(weather=EndpointFaults(outages=(Outage(start=3, end=6),))))
    async with connect(world) as c:
        statuses = [
            (await c.get("/weather", params={"city": "北京"})).status_code for _ in range(9)
        ]
        other = (await c.get("/cities")).status_code
    assert statuses == [200, 200, 200, 503, 503, 503, 200, 200, 200]
    assert other == 200
    assert [e.index for e in world.fault_log(kind=WorldFaultKind.OUTAGE)] == [3, 4, 5]


async def test_time_based_repeating_outage(
    make_world: MakeWorld, connect: Connect, clock: FakeClock
) -> None:
    outage = Outage(unit="seconds", start=10, end=20, every=30, status=502, retry_after_s=5)
    world = make_world(_profile(weather=EndpointFaults(outages=(outage,))))
    seen = []
    async with connect(world) as c:
        for t in (0, 9.9, 10, 19.9, 20, 39.9, 40, 49.9, 50):
            clock.now = 1000.0 + t
            r = await c.get("/weather", params={"city": "北京"})
            seen.append((t, r.status_code, r.headers.get("retry-after")))
    assert seen == [
        (0, 200, None),
        (9.9, 200, None),
        (10, 502, "0"),
        (19.9, 502, "0"),
        (20, 200, None),
        (39.9, 200, None),
        (40, 502, "0"),
        (49.9, 502, "0"),
        (50, 200, None),
    ]
    assert [round(e.t_s, 1) for e in world.fault_log(kind="outage")] == [10, 19.9, 40, 49.9]


async def test_slow_period_and_latency_scale(
    make_world: MakeWorld, connect: Connect, sleeps: RecordingSleep
) -> None:
    faults = EndpointFaults(
        latency=FixedLatency(ms=100),
        slow_periods=(SlowPeriod(start=2, end=4, factor=5, extra_ms=50),),
    )
    world = make_world(_profile(flights=faults), latency_scale=0.5)
    params = {"from": "北京", "to": "上海", "date": TOMORROW}
    async with connect(world) as c:
        for _ in range(5):
            assert (await c.get("/flights", params=params)).status_code == 200
        await c.get("/cities")  # no latency configured there
    assert sleeps.calls == pytest.approx([0.05, 0.05, 0.275, 0.275, 0.05])
    slow = world.fault_log(kind=WorldFaultKind.SLOW)
    assert [e.index for e in slow] == [2, 3] and slow[0].latency_s == pytest.approx(0.55)


async def test_rate_limit_sends_retry_after_scaled(make_world: MakeWorld, connect: Connect) -> None:
    faults = EndpointFaults(rate_limit_rate=1.0, retry_after_s=2)
    for scale, header in ((1.0, "2"), (0.25, "0.500")):
        world = make_world(_profile(weather=faults), latency_scale=scale)
        async with connect(world) as c:
            r = await c.get("/weather", params={"city": "北京"})
        assert r.status_code == 429 and r.headers["retry-after"] == header
        assert r.json()["error"] == "rate_limited"
        (event,) = world.fault_log(kind=WorldFaultKind.RATE_LIMIT)
        assert event.retry_after_s == 2 and event.request_id == r.headers["x-request-id"]


async def test_empty_and_drift_change_reads_only(make_world: MakeWorld, connect: Connect) -> None:
    drift = DriftSpec(renames={"price_cny": "price"}, drops=("seats_left",))
    world = make_world(
        _profile(
            flights=EndpointFaults(drift_rate=1.0, drift=drift),
            rooms=EndpointFaults(empty_rate=1.0),
            payments_create=EndpointFaults(empty_rate=1.0, drift_rate=0.0),
        )
    )
    async with connect(world) as c:
        flights = (
            await c.get("/flights", params={"from": "北京", "to": "上海", "date": TOMORROW})
        ).json()
        rooms = (await c.get("/rooms")).json()
        missing = await c.get("/flights", params={"from": "北京", "to": "沪", "date": TOMORROW})
        pay = await c.post("/payments", json={"order_id": "ORD-70001"})
    assert flights["flights"] and all(
        "price" in f and "price_cny" not in f for f in flights["flights"]
    )
    assert all("seats_left" not in f for f in flights["flights"])
    assert rooms == {"date": None, "min_capacity": None, "rooms": [], "count": 0}
    assert missing.status_code == 404  # a 404 is not drifted; and no drift is logged for it
    assert pay.status_code == 201 and "payment_id" in pay.json()
    kinds = [(e.endpoint, e.kind) for e in world.fault_log()]
    assert kinds == [("flights", WorldFaultKind.DRIFT), ("rooms", WorldFaultKind.EMPTY)]


async def test_commit_then_fail_duplicates_without_a_key_not_with_one(
    make_world: MakeWorld, connect: Connect
) -> None:
    faults = EndpointFaults(commit_then_fail_rate=1.0)
    world = make_world(_profile(orders_pay=faults))
    async with connect(world) as c:
        order = (
            await c.post(
                "/orders", json={"customer": "陈静", "items": [{"sku": "SKU-1002", "quantity": 1}]}
            )
        ).json()
        url = f"/orders/{order['order_id']}/pay"
        naive = [(await c.post(url)).status_code for _ in range(3)]
        assert naive == [503, 503, 503]
        c1 = world.counters()["orders_pay"]
        assert (c1.effects, c1.duplicates, c1.commit_then_fail) == (3, 2, 3)

        world.reset()
        order = (
            await c.post(
                "/orders", json={"customer": "陈静", "items": [{"sku": "SKU-1002", "quantity": 1}]}
            )
        ).json()
        url = f"/orders/{order['order_id']}/pay"
        keyed = [await c.post(url, headers={"Idempotency-Key": "k1"}) for _ in range(3)]
    assert [r.status_code for r in keyed] == [503, 201, 201]
    assert keyed[1].json() == keyed[2].json()
    c2 = world.counters()["orders_pay"]
    assert (c2.effects, c2.duplicates, c2.replays, c2.commit_then_fail) == (1, 0, 2, 1)
    events = world.fault_log(kind=WorldFaultKind.COMMIT_THEN_FAIL)
    assert [e.request_id for e in events] == [keyed[0].headers["x-request-id"]]


async def test_a_short_circuited_effect_changes_nothing(
    make_world: MakeWorld, connect: Connect
) -> None:
    world = make_world(
        _profile(payments_create=EndpointFaults(error_rate=1.0, error_statuses=(500,)))
    )
    async with connect(world) as c:
        r = await c.post(
            "/payments", json={"order_id": "ORD-70001"}, headers={"Idempotency-Key": "a"}
        )
    assert r.status_code == 500 and r.json()["error"] == "internal_error"
    c1 = world.counters()["payments_create"]
    assert (c1.calls, c1.faulted, c1.effects) == (1, 1, 0)
    assert world.payments == {}


async def test_admin_faults_endpoint_filters(make_world: MakeWorld, connect: Connect) -> None:
    world = make_world("seed000")
    async with connect(world) as c:
        for _ in range(40):
            await c.get("/cities")
        everything = (await c.get("/admin/faults")).json()
        errors = (await c.get("/admin/faults", params={"kind": "error"})).json()
        none = (await c.get("/admin/faults", params={"endpoint": "weather"})).json()
        bad = await c.get("/admin/faults", params={"kind": "meteor"})
    assert everything["count"] == len(world.fault_log()) >= 40
    assert errors["count"] == len(world.fault_log(kind="error")) > 0
    assert all(e["kind"] == "error" for e in errors["faults"])
    assert none == {"faults": [], "count": 0}
    assert bad.status_code == 422
    assert "/admin/faults" not in {e.endpoint for e in world.fault_log()}


async def test_admin_and_health_are_never_faulted(make_world: MakeWorld, connect: Connect) -> None:
    everything = EndpointFaults(error_rate=1.0)
    world = make_world(WorldFaultProfile(default=everything))
    async with connect(world) as c:
        assert (await c.get("/cities")).status_code in (500, 503)
        assert (await c.get("/health")).status_code == 200
        assert (await c.get("/admin/counters")).status_code == 200


def test_bad_latency_scale_is_refused() -> None:
    with pytest.raises(ValueError, match="latency_scale"):
        World(latency_scale=-1.0)
    with pytest.raises(ValueError, match="latency_scale"):
        World(latency_scale=float("nan"))


async def test_world_delay_uses_the_injected_sleep(
    make_world: MakeWorld, sleeps: RecordingSleep
) -> None:
    world = make_world(latency_scale=2.0)
    await world.delay(0.25)
    await world.delay(0.0)
    assert sleeps.calls == [0.5]
