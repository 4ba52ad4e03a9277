"""The public surface of closedloop.server is pinned and sorted."""

from __future__ import annotations

from types import FunctionType

import closedloop.server as server

EXPECTED = {
    "AGENT_ENTRY_POINT_GROUP", "KEY_NAMESPACE", "AgentContext", "AgentFactory", "AgentRegistry",
    "AgentSpec", "ApiKeyInfo", "ApiKeys", "CreatedKey", "Principal",
    "RateLimit", "RateLimiter", "RunHub", "RunManager", "ScopedStore", "ServerSettings",
    "Service", "ServiceMetrics", "TaskBuilder", "TokenBucket", "create_app",
    "default_registry", "open_store",
}  # fmt: skip


def isort_order(name: str) -> tuple[int, str]:
    """ruff's __all__ order: CONSTANTS, then Classes, then functions."""
    return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)


def test_exported_members_are_pinned_and_sorted() -> None:
    assert set(server.__all__) == EXPECTED
    assert server.__all__ == sorted(server.__all__, key=isort_order)
    for name in server.__all__:
        obj = getattr(server, name)
        if isinstance(obj, type | FunctionType):
            assert obj.__module__ == "closedloop.server", name


def test_the_dashboard_ships_inside_the_package() -> None:
    from pathlib import Path

    static = Path(server.__file__).with_name("static")
    assert {p.name for p in static.iterdir()} >= {"index.html", "app.js", "chart.js", "app.css"}
