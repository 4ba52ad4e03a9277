"""Deciding a request's faults: a pure function of (seed, endpoint, index, elapsed time).

Each request draws from its own ``random.Random`` keyed by a hash of (seed, endpoint,
per-endpoint request index), so the order in which concurrent requests to *different*
endpoints arrive cannot change any outcome, and an oracle can recompute every fault
without a server. A profile with regimes (``closedloop_bench.world._regimes``) adds one
more input, the request's index among its service's requests, which picks the regime
the service is in; without regimes every plan is what it was.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import random
from dataclasses import dataclass, field
from enum import StrEnum
from statistics import NormalDist
from typing import Any

from pydantic import BaseModel, ConfigDict

from ._endpoints import ENDPOINTS, EndpointKind
from ._faults import (
    DEFAULT_DRIFT,
    DriftSpec,
    EndpointFaults,
    FixedLatency,
    LatencyModel,
    UniformLatency,
    WorldFaultProfile,
)
from ._regimes import SERVICES, Regime, RegimeChain

__all__ = [
    "FaultPlan",
    "FaultPlanner",
    "WorldFaultEvent",
    "WorldFaultKind",
    "apply_drift",
    "empty_body",
]

_UNIT_NORMAL = NormalDist()


class WorldFaultKind(StrEnum):
    """What was injected. ``latency``/``slow`` go with any outcome; the rest exclude each other."""

    LATENCY = "latency"
    SLOW = "slow"
    OUTAGE = "outage"
    RATE_LIMIT = "rate_limit"
    ERROR = "error"
    EMPTY = "empty"
    DRIFT = "drift"
    COMMIT_THEN_FAIL = "commit_then_fail"


# The outcomes that answer without running the endpoint at all.
SHORT_CIRCUIT = frozenset({WorldFaultKind.OUTAGE, WorldFaultKind.RATE_LIMIT, WorldFaultKind.ERROR})


class WorldFaultEvent(BaseModel):
    """One injected fault, ground truth for benchmarks: which request, what, when.

    ``latency_s`` is the nominal injected delay (before ``latency_scale``); ``t_s`` is
    seconds since the world started or was last reset.
    """

    model_config = ConfigDict(frozen=True)

    request_id: str
    endpoint: str
    index: int
    kind: WorldFaultKind
    t_s: float
    status: int | None = None
    latency_s: float | None = None
    retry_after_s: float | None = None
    detail: str = ""


@dataclass(frozen=True, slots=True)
class FaultPlan:
    """What will happen to one request. ``outcome`` is None when it passes untouched."""

    endpoint: str
    index: int
    latency_s: float
    slow: bool
    outcome: WorldFaultKind | None
    status: int | None = None
    retry_after_s: float | None = None
    drift: DriftSpec | None = field(default=None)
    regime: Regime | None = None

    @property
    def short_circuit(self) -> bool:
        """True when the endpoint does not run (outage, 429, error)."""
        return self.outcome in SHORT_CIRCUIT


def _request_rng(seed: int, endpoint: str, index: int) -> random.Random:
    digest = hashlib.blake2b(f"{seed}\x1f{endpoint}\x1f{index}".encode(), digest_size=8)
    return random.Random(int.from_bytes(digest.digest(), "big"))


def _latency_ms(model: LatencyModel | None, u: float) -> float:
    if model is None:
        return 0.0
    if isinstance(model, FixedLatency):
        return model.ms
    if isinstance(model, UniformLatency):
        return model.low_ms + u * (model.high_ms - model.low_ms)
    z = _UNIT_NORMAL.inv_cdf(min(max(u, 1e-12), 1.0 - 1e-12))
    return min(model.cap_ms, model.median_ms * math.exp(model.sigma * z))


def _draw_outcome(f: EndpointFaults, u: float) -> WorldFaultKind | None:
    edge = 0.0
    for outcome, rate in (
        (WorldFaultKind.RATE_LIMIT, f.rate_limit_rate),
        (WorldFaultKind.ERROR, f.error_rate),
        (WorldFaultKind.EMPTY, f.empty_rate),
        (WorldFaultKind.DRIFT, f.drift_rate),
        (WorldFaultKind.COMMIT_THEN_FAIL, f.commit_then_fail_rate),
    ):
        edge += rate
        if u < edge:
            return outcome
    return None


class FaultPlanner:
    """Plans the faults of every request for one profile and seed."""

    def __init__(self, profile: WorldFaultProfile, seed: int) -> None:
        self.profile = profile
        self.seed = seed
        self._faults = {name: profile.for_endpoint(name) for name in ENDPOINTS}
        self.regimes = None if profile.regimes is None else RegimeChain(profile.regimes, seed)

    def faults(self, endpoint: str) -> EndpointFaults:
        """The effective settings of ``endpoint``."""
        return self._faults[endpoint]

    def plan(
        self,
        endpoint: str,
        index: int,
        elapsed_s: float = 0.0,
        service_index: int | None = None,
    ) -> FaultPlan:
        """The faults of request number ``index`` (0-based) to ``endpoint`` at ``elapsed_s``;
        ``service_index`` (the request's index among its service's) applies the regimes."""
        plan = self._plan(endpoint, index, elapsed_s)
        if self.regimes is None or service_index is None:
            return plan
        return self._in_regime(plan, service_index)

    def _in_regime(self, plan: FaultPlan, service_index: int) -> FaultPlan:
        assert self.regimes is not None
        spec = self.regimes.spec
        endpoint = plan.endpoint
        spell = self.regimes.spell_at(SERVICES[endpoint], service_index)
        regime = spell.regime
        # A draw of its own, so regimes never shift the stream of the ordinary faults.
        u = _request_rng(self.seed, f"{endpoint}\x1fregime", plan.index).random()
        latency_s, slow = plan.latency_s, plan.slow
        if regime is Regime.DOWN:
            return dataclasses.replace(
                plan,
                outcome=WorldFaultKind.OUTAGE,
                status=spec.down_status,
                retry_after_s=spec.down_retry_after_s,
                drift=None,
                regime=regime,
            )
        if regime is Regime.STORM:
            return dataclasses.replace(
                plan,
                outcome=WorldFaultKind.RATE_LIMIT,
                status=429,
                retry_after_s=spec.storm_retry_after_s,
                drift=None,
                regime=regime,
            )
        if regime is Regime.DEGRADED:
            factor = 1.0 + (spec.latency_ramp - 1.0) * spell.progress(service_index)
            latency_s, slow = latency_s * factor, slow or factor > 1.0
            if not plan.short_circuit and u < spec.degraded_error_rate:
                statuses = self._faults[endpoint].error_statuses
                return dataclasses.replace(
                    plan,
                    latency_s=latency_s,
                    slow=slow,
                    outcome=WorldFaultKind.ERROR,
                    status=statuses[int(u * len(statuses) / spec.degraded_error_rate)],
                    retry_after_s=None,
                    drift=None,
                    regime=regime,
                )
        plan = dataclasses.replace(plan, latency_s=latency_s, slow=slow, regime=regime)
        read = ENDPOINTS[endpoint].kind is EndpointKind.READ
        if read and not plan.short_circuit and self.regimes.drifted(service_index):
            f = self._faults[endpoint]
            drift = f.drift if f.drift is not None else DEFAULT_DRIFT.get(endpoint, DriftSpec())
            return dataclasses.replace(plan, outcome=WorldFaultKind.DRIFT, status=None, drift=drift)
        return plan

    def _plan(self, endpoint: str, index: int, elapsed_s: float) -> FaultPlan:
        f = self._faults[endpoint]
        kind = ENDPOINTS[endpoint].kind
        rng = _request_rng(self.seed, endpoint, index)
        # Always three draws in this order, whatever is configured, so that changing one
        # rate does not shift the random stream of the others.
        u_latency, u_outcome, u_status = rng.random(), rng.random(), rng.random()
        latency_ms = _latency_ms(f.latency, u_latency)
        slow = False
        for period in f.slow_periods:
            if period.contains(index, elapsed_s):
                latency_ms = latency_ms * period.factor + period.extra_ms
                slow = True
                break
        latency_s = latency_ms / 1000.0
        for outage in f.outages:
            if outage.contains(index, elapsed_s):
                return FaultPlan(
                    endpoint,
                    index,
                    latency_s,
                    slow,
                    WorldFaultKind.OUTAGE,
                    status=outage.status,
                    retry_after_s=outage.retry_after_s,
                )
        outcome = _draw_outcome(f, u_outcome)
        if outcome is None:
            return FaultPlan(endpoint, index, latency_s, slow, None)
        if outcome is WorldFaultKind.RATE_LIMIT:
            return FaultPlan(
                endpoint, index, latency_s, slow, outcome, 429, retry_after_s=f.retry_after_s
            )
        if outcome is WorldFaultKind.ERROR:
            status = f.error_statuses[int(u_status * len(f.error_statuses))]
            return FaultPlan(endpoint, index, latency_s, slow, outcome, status)
        read = kind is EndpointKind.READ
        if outcome is WorldFaultKind.COMMIT_THEN_FAIL:
            if read:
                return FaultPlan(endpoint, index, latency_s, slow, None)
            return FaultPlan(endpoint, index, latency_s, slow, outcome, f.commit_then_fail_status)
        if not read:  # empty and drift change answers to reads only
            return FaultPlan(endpoint, index, latency_s, slow, None)
        drift = None
        if outcome is WorldFaultKind.DRIFT:
            drift = f.drift if f.drift is not None else DEFAULT_DRIFT.get(endpoint, DriftSpec())
        return FaultPlan(endpoint, index, latency_s, slow, outcome, drift=drift)


def _drift_one(obj: dict[str, Any], spec: DriftSpec, changed: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in obj.items():
        if key in spec.drops:
            changed.append(f"-{key}")
            continue
        new = spec.renames.get(key, key)
        if new != key:
            changed.append(f"{key}->{new}")
        out[new] = value
    return out


def apply_drift(body: Any, spec: DriftSpec) -> tuple[Any, list[str]]:
    """Rename and drop keys in ``body`` and in the dicts of its top-level lists.

    Returns the new body and what changed (``a->b`` renames, ``-c`` drops), once per
    distinct change.
    """
    changed: list[str] = []
    if not isinstance(body, dict):
        return body, changed
    out = _drift_one(body, spec, changed)
    for key, value in out.items():
        if isinstance(value, list):
            out[key] = [_drift_one(v, spec, changed) if isinstance(v, dict) else v for v in value]
    return out, list(dict.fromkeys(changed))


def empty_body(endpoint: str, body: Any) -> Any:
    """The body an ``empty`` fault answers: the collection emptied, or identity fields only."""
    spec = ENDPOINTS[endpoint]
    if not isinstance(body, dict):
        return body
    if spec.collection is not None:
        out = dict(body)
        out[spec.collection] = []
        if "count" in out:
            out["count"] = 0
        return out
    return {k: v for k, v in body.items() if k in spec.keep_on_empty}
