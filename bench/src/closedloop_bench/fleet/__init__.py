"""Many agents, one rate-limited provider: the plant, the client strategies, the benchmark."""

from __future__ import annotations

from ._plant import SCHEDULES, Capacity, Provider, ProviderConfig, Schedule, capacity_rps, schedule
from ._sim import STRATEGIES, FleetStrategy, SimResult, simulate

__all__ = [
    "SCHEDULES",
    "STRATEGIES",
    "Capacity",
    "FleetStrategy",
    "Provider",
    "ProviderConfig",
    "Schedule",
    "SimResult",
    "capacity_rps",
    "schedule",
    "simulate",
]
