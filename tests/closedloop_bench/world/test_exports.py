"""The public surface of closedloop_bench.world is pinned; every endpoint is served."""

from __future__ import annotations

import closedloop_bench.world as world
from closedloop_bench.world import ENDPOINTS, EndpointKind, create_world_app

EXPECTED = {
    "DEFAULT_DRIFT", "DEFAULT_SEED", "ENDPOINTS", "LOOKALIKES", "TODAY", "City", "Company",
    "Document", "DriftSpec", "EffectCounters", "WorldEffectRecord", "EndpointFaults", "EndpointKind",
    "EndpointSpec", "WorldFaultEvent", "WorldFaultKind", "FaultPlan", "FaultPlanner", "WorldFaultProfile",
    "Figures", "FixedLatency", "Flight", "HistoricalOrder", "LognormalLatency", "OrderLine",
    "Outage", "Product", "Room", "RoomClosure", "RoomReservation", "SlowPeriod", "Tracking",
    "UniformLatency", "WeatherDay", "World", "WorldData", "WorldHandle", "add_ocr_noise",
    "create_world_app", "generate_world", "load_profile", "load_profile_file", "load_world",
    "named_profiles", "run_world", "serve_world", "serve_world_async", "world_from_files",
    "world_to_files", "SERVICES", "Regime", "RegimeChange", "RegimeSpec", "with_onset_rate",
}  # fmt: skip


def isort_order(name: str) -> tuple[int, str]:
    """ruff's __all__ order: CONSTANTS, then Classes, then functions."""
    return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)


def test_exported_members_are_pinned_and_sorted() -> None:
    assert set(world.__all__) == EXPECTED
    assert world.__all__ == sorted(world.__all__, key=isort_order)
    for name in world.__all__:
        obj = getattr(world, name)
        if isinstance(obj, type):
            assert obj.__module__ == "closedloop_bench.world", name


def test_the_endpoint_table_matches_the_app_routes() -> None:
    app = create_world_app(latency_scale=0.0)
    routes = {
        (r.name, next(iter(r.methods)), r.path)  # type: ignore[attr-defined]
        for r in app.routes
        if getattr(r, "name", None) in ENDPOINTS
    }
    assert routes == {(s.name, s.method, s.path) for s in ENDPOINTS.values()}
    kinds = {s.kind for s in ENDPOINTS.values()}
    assert kinds == set(EndpointKind)
    for spec in ENDPOINTS.values():
        assert spec.mutating == (spec.method == "POST")
