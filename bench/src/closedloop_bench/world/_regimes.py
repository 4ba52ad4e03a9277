"""Disturbances with memory: per-service regimes that persist, and their ground truth.

Faults drawn independently per request leave nothing to predict. Real services go bad
and stay bad for a while: a service here moves through regimes,

* ``healthy``: the profile's ordinary per-request faults;
* ``degraded``: a raised error rate and a latency ramp, the delay growing linearly over
  the spell from 1× to ``latency_ramp``×, so that trouble shows before it fails;
* ``down``: every request fails with ``down_status`` (and ``Retry-After``);
* ``storm``: every request is refused with 429 and a ``Retry-After`` header;

as a semi-Markov chain (a Markov chain over regimes with a dwell time in each): a healthy
service leaves healthy with probability ``onset_rate`` (λ) per request, for a regime
drawn from ``onset_mix``; a spell's length is geometric with mean ``dwell[regime]``
requests; a degraded spell ends in ``down`` with probability ``worsen``, otherwise in
``healthy``; ``down`` and ``storm`` end in ``healthy``. Schema drift can also start
mid-episode and stay: from the service's request ``drift_from`` on, every read answers
in the drifted schema.

The chain runs on each service's own request count (requests to any of its endpoints,
in arrival order), drawn from a generator keyed by (seed, service): the same seed gives
the same regimes, and traffic to one service cannot move another's. The regime changes
a run actually reached are its ground truth, :class:`RegimeChange` (which service, at
which of its requests and when, from which regime to which).
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Annotated, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ._endpoints import ENDPOINTS

__all__ = [
    "SERVICES",
    "Regime",
    "RegimeChain",
    "RegimeChange",
    "RegimeSpec",
    "Spell",
]


class Regime(StrEnum):
    """A service's state; anything but ``healthy`` is a disturbance with memory."""

    HEALTHY = "healthy"
    DEGRADED = "degraded"
    DOWN = "down"
    STORM = "storm"


# Endpoints that share a backend share its regime.
SERVICES: Mapping[str, str] = MappingProxyType(
    {
        "cities": "cities",
        "weather": "weather",
        "flights": "flights",
        "bookings_create": "bookings",
        "bookings_get": "bookings",
        "bookings_cancel": "bookings",
        "payments_create": "payments",
        "payments_get": "payments",
        "payments_refund": "payments",
        "rooms": "rooms",
        "room_slots": "rooms",
        "room_bookings_create": "rooms",
        "room_bookings_cancel": "rooms",
        "products": "shop",
        "orders_list": "shop",
        "orders_create": "shop",
        "orders_get": "shop",
        "orders_pay": "shop",
        "orders_cancel": "shop",
        "documents": "documents",
        "documents_get": "documents",
    }
)
assert set(SERVICES) == set(ENDPOINTS), "every endpoint belongs to one service"

_DISTURBED = (Regime.DEGRADED, Regime.DOWN, Regime.STORM)


class RegimeSpec(BaseModel):
    """The regimes of a fault profile (see the module); every field is checked on load."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    onset_rate: float = 0.05
    dwell: dict[Regime, float] = Field(
        default_factory=lambda: {Regime.DEGRADED: 6.0, Regime.DOWN: 3.0, Regime.STORM: 3.0}
    )
    onset_mix: dict[Regime, float] = Field(
        default_factory=lambda: {Regime.DEGRADED: 0.6, Regime.DOWN: 0.2, Regime.STORM: 0.2}
    )
    worsen: Annotated[float, Field(ge=0.0, le=1.0)] = 0.3
    degraded_error_rate: Annotated[float, Field(ge=0.0, le=1.0)] = 0.3
    latency_ramp: Annotated[float, Field(ge=1.0, le=100.0)] = 4.0
    down_status: Annotated[int, Field(ge=500, le=599)] = 503
    down_retry_after_s: Annotated[float, Field(ge=0.0, le=3600.0)] | None = None
    storm_retry_after_s: Annotated[float, Field(ge=0.0, le=3600.0)] = 1.0
    drift_from: Annotated[int, Field(ge=0)] | None = None
    horizon: Annotated[int, Field(ge=1, le=1_000_000)] = 10_000

    @field_validator("onset_rate")
    @classmethod
    def _rate(cls, value: float) -> float:
        if not (math.isfinite(value) and 0.0 <= value <= 1.0):
            raise ValueError(f"onset_rate (λ) must lie in [0, 1], got {value!r}")
        return value

    @field_validator("dwell")
    @classmethod
    def _dwell(cls, value: dict[Regime, float]) -> dict[Regime, float]:
        for regime, mean in value.items():
            if regime is Regime.HEALTHY:
                raise ValueError("dwell.healthy is 1 / onset_rate; give onset_rate instead")
            if not (math.isfinite(mean) and mean > 0.0):
                raise ValueError(f"dwell.{regime.value} must be > 0 requests, got {mean!r}")
        return value

    @field_validator("onset_mix")
    @classmethod
    def _mix(cls, value: dict[Regime, float]) -> dict[Regime, float]:
        for regime, weight in value.items():
            if regime is Regime.HEALTHY:
                raise ValueError("onset_mix names the regimes an onset leads to, not healthy")
            if not (math.isfinite(weight) and weight >= 0.0):
                raise ValueError(f"onset_mix.{regime.value} must be >= 0, got {weight!r}")
        if value and sum(value.values()) <= 0.0:
            raise ValueError("onset_mix needs one weight > 0")
        return value

    @model_validator(mode="after")
    def _every_onset_has_a_dwell(self) -> Self:
        missing = sorted(
            r.value for r, w in self.onset_mix.items() if w > 0 and r not in self.dwell
        )
        if self.worsen > 0 and Regime.DOWN not in self.dwell:
            missing = sorted({*missing, Regime.DOWN.value})
        if missing:
            raise ValueError(f"dwell has no mean for {missing}")
        return self

    def mean_dwell(self, regime: Regime) -> float:
        """Mean spell length in requests (healthy: ``1 / onset_rate``, inf at λ = 0)."""
        if regime is Regime.HEALTHY:
            return math.inf if self.onset_rate == 0.0 else 1.0 / self.onset_rate
        return self.dwell[regime]


@dataclass(frozen=True, slots=True)
class Spell:
    """One stay in a regime: the service's requests ``start`` up to (not including) ``end``."""

    regime: Regime
    start: int
    end: int

    def progress(self, index: int) -> float:
        """How far into the spell request ``index`` is, from 0 (first) towards 1 (last)."""
        return (index - self.start) / max(1, self.end - self.start)


class RegimeChange(BaseModel):
    """Ground truth: ``service`` moved ``from_regime`` → ``to_regime`` at its request
    ``index`` (the first one served in the new regime), ``t_s`` seconds into the episode."""

    model_config = ConfigDict(frozen=True)

    service: str
    index: int
    t_s: float
    from_regime: Regime
    to_regime: Regime

    @property
    def onset(self) -> bool:
        """A change out of ``healthy``: where a warning should come before failures."""
        return self.from_regime is Regime.HEALTHY


def _geometric(rng: random.Random, mean: float) -> int:
    """A spell length >= 1 with the given mean (mean <= 1 gives 1)."""
    if mean <= 1.0:
        return 1
    if math.isinf(mean):
        return 1 << 62
    stay = 1.0 - 1.0 / mean
    u = 1.0 - rng.random()  # in (0, 1]: log is finite
    return 1 + int(math.log(u) / math.log(stay))


class RegimeChain:
    """The spells of every service for one spec and seed, drawn once and then looked up."""

    def __init__(self, spec: RegimeSpec, seed: int) -> None:
        self.spec = spec
        self.seed = seed
        self._spells: dict[str, tuple[Spell, ...]] = {}

    def spells(self, service: str) -> tuple[Spell, ...]:
        """The service's spells from request 0 to the spec's horizon, in order."""
        cached = self._spells.get(service)
        if cached is None:
            cached = self._spells[service] = self._draw(service)
        return cached

    def _draw(self, service: str) -> tuple[Spell, ...]:
        spec = self.spec
        digest = hashlib.blake2b(f"{self.seed}\x1fregimes\x1f{service}".encode(), digest_size=8)
        rng = random.Random(int.from_bytes(digest.digest(), "big"))
        mix = [(r, spec.onset_mix.get(r, 0.0)) for r in _DISTURBED]
        total = sum(w for _, w in mix)
        spells: list[Spell] = []
        regime, start = Regime.HEALTHY, 0
        while start < spec.horizon:
            # Fixed draws per spell (length, then the next regime), whatever is configured.
            length = _geometric(rng, spec.mean_dwell(regime))
            u_next = rng.random()
            end = min(spec.horizon, start + length)
            spells.append(Spell(regime, start, end))
            if regime is Regime.HEALTHY:
                if total <= 0.0:
                    break
                edge, regime = 0.0, Regime.DEGRADED
                for candidate, weight in mix:
                    edge += weight / total
                    if u_next < edge and weight > 0.0:
                        regime = candidate
                        break
            elif regime is Regime.DEGRADED and u_next < spec.worsen:
                regime = Regime.DOWN
            else:
                regime = Regime.HEALTHY
            start = end
        if spells[-1].end < spec.horizon:
            last = spells[-1]
            spells[-1] = Spell(last.regime, last.start, spec.horizon)
        return tuple(spells)

    def spell_at(self, service: str, index: int) -> Spell:
        """The spell the service's request ``index`` falls in (past the horizon: healthy)."""
        spells = self.spells(service)
        lo, hi = 0, len(spells) - 1
        if index >= spells[-1].end:
            return Spell(Regime.HEALTHY, spells[-1].end, index + 1)
        while lo < hi:
            mid = (lo + hi) // 2
            if spells[mid].end <= index:
                lo = mid + 1
            else:
                hi = mid
        return spells[lo]

    def drifted(self, service_index: int) -> bool:
        """Whether reads answer in the drifted schema at this service request index."""
        start = self.spec.drift_from
        return start is not None and service_index >= start
