"""The world: local HTTP services with injected faults, as measurable ground truth.

Weather (with users' typos and abbreviations), flights, bookings and payments,
meeting rooms, a shop, and quarterly reports with OCR noise, all generated from a seed.
A ``WorldFaultProfile`` adds latency, errors, 429s, empty answers, schema drift, outages and
slow periods per endpoint, deterministically per (seed, endpoint, request index); every
injected fault is logged under the request's ``x-request-id``, and every effect is
counted so duplicates show.

    with serve_world("seed000", seed=0, latency_scale=0.0) as world:
        httpx.get(f"{world.base_url}/weather", params={"city": "北京"})
        world.fault_log, world.counters
"""

from __future__ import annotations

from ._app import create_world_app
from ._data import (
    DEFAULT_SEED,
    City,
    Company,
    Document,
    Figures,
    Flight,
    HistoricalOrder,
    OrderLine,
    Product,
    Room,
    RoomClosure,
    RoomReservation,
    Tracking,
    WeatherDay,
    WorldData,
    load_world,
    world_from_files,
    world_to_files,
)
from ._endpoints import ENDPOINTS, EndpointKind, EndpointSpec
from ._faults import (
    DEFAULT_DRIFT,
    DriftSpec,
    EndpointFaults,
    FixedLatency,
    LognormalLatency,
    Outage,
    SlowPeriod,
    UniformLatency,
    WorldFaultProfile,
    load_profile,
    load_profile_file,
    named_profiles,
    with_onset_rate,
)
from ._generate import TODAY, generate_world
from ._injector import FaultPlan, FaultPlanner, WorldFaultEvent, WorldFaultKind
from ._ocr import LOOKALIKES, add_ocr_noise
from ._regimes import SERVICES, Regime, RegimeChange, RegimeSpec
from ._schemas import EffectCounters, WorldEffectRecord
from ._server import WorldHandle, run_world, serve_world, serve_world_async
from ._world import World

__all__ = [
    "DEFAULT_DRIFT",
    "DEFAULT_SEED",
    "ENDPOINTS",
    "LOOKALIKES",
    "SERVICES",
    "TODAY",
    "City",
    "Company",
    "Document",
    "DriftSpec",
    "EffectCounters",
    "EndpointFaults",
    "EndpointKind",
    "EndpointSpec",
    "FaultPlan",
    "FaultPlanner",
    "Figures",
    "FixedLatency",
    "Flight",
    "HistoricalOrder",
    "LognormalLatency",
    "OrderLine",
    "Outage",
    "Product",
    "Regime",
    "RegimeChange",
    "RegimeSpec",
    "Room",
    "RoomClosure",
    "RoomReservation",
    "SlowPeriod",
    "Tracking",
    "UniformLatency",
    "WeatherDay",
    "World",
    "WorldData",
    "WorldEffectRecord",
    "WorldFaultEvent",
    "WorldFaultKind",
    "WorldFaultProfile",
    "WorldHandle",
    "add_ocr_noise",
    "create_world_app",
    "generate_world",
    "load_profile",
    "load_profile_file",
    "load_world",
    "named_profiles",
    "run_world",
    "serve_world",
    "serve_world_async",
    "with_onset_rate",
    "world_from_files",
    "world_to_files",
]

for _name in __all__:
    _obj = globals()[_name]
    if isinstance(_obj, type):
        _obj.__module__ = __name__
del _name, _obj
