"""Many agents, one rate-limited provider: the plant, the client strategies, the benchmark."""

from __future__ import annotations

from ._plant import SCHEDULES, Capacity, Provider, ProviderConfig, Schedule, capacity_rps, schedule
from ._sim import STRATEGIES, SimResult, FleetStrategy, simulate

__all__ = [
    "SCHEDULES",
    "STRATEGIES",
    "Capacity",
    "Provider",
    "ProviderConfig",
    "Schedule",
    "SimResult",
    "FleetStrategy",
    "capacity_rps",
    "schedule",
    "simulate",
]
