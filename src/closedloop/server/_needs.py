"""The service runs on FastAPI and exports Prometheus metrics (the ``server`` extra).

Imported first by the package, so a missing extra is one sentence naming it rather than
a ``ModuleNotFoundError`` from inside a route module.
"""

from __future__ import annotations

from .._extras import require_extra

for _module in ("fastapi", "starlette", "prometheus_client"):
    require_extra(_module, "server", "the service (closedloop.server)")
