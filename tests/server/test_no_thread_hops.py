"""No route or dependency of the service runs on the thread pool.

FastAPI runs a plain ``def`` endpoint or dependency on a worker thread (a thread hop per
request); the service's are coroutines, so a request stays on the event loop.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from fastapi.routing import APIRoute

from closedloop.feedback import MemoryStore
from closedloop.server import create_app

from .conftest import ManualClock, build_settings


def _routes(routes: Iterable[Any]) -> Iterator[APIRoute]:
    for route in routes:
        if isinstance(route, APIRoute):
            yield route
        # A router included in the app: FastAPI keeps it whole, its routes inside.
        included = getattr(route, "original_router", None)
        if included is not None:
            yield from _routes(included.routes)


def _calls(dependant: Any) -> Iterator[Any]:
    if dependant.call is not None:
        yield dependant.call
    for sub in dependant.dependencies:
        yield from _calls(sub)


def test_every_route_and_dependency_is_a_coroutine(tmp_path: Path) -> None:
    app = create_app(build_settings(MemoryStore(), tmp_path, ManualClock()))
    routes = list(_routes(app.routes))
    paths = {route.path for route in routes}
    # the service's own routes and those of the sessions and handover routers
    assert {"/healthz", "/v1/sessions", "/v1/sessions/{session_id}/runs"} <= paths
    assert any(path.startswith("/v1/handover") for path in paths)
    blocking = sorted(
        {
            f"{route.path}: {getattr(call, '__qualname__', call)}"
            for route in routes
            for call in _calls(route.dependant)
            if not (inspect.iscoroutinefunction(call) or inspect.isasyncgenfunction(call))
        }
    )
    assert blocking == []
