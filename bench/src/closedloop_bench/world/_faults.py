"""Fault profiles: what can go wrong at each endpoint, and how often.

A profile has a ``default`` that applies to every endpoint and per-endpoint overrides
(only the fields an override sets replace the default's). Per request, exactly one
outcome is drawn from the rates (``rate_limit`` → ``error`` → ``empty`` → ``drift`` →
``commit_then_fail`` → pass), so their sum must not exceed 1; an outage window wins over
the draw; latency (and a slow period's extra) applies to every request.

``empty`` and ``drift`` apply to read endpoints only (an answer to change);
``commit_then_fail`` to effect and compensation endpoints only: the effect happens, then
the client receives an error, which is where idempotency keys earn their keep.
"""

from __future__ import annotations

import json
import math
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from closedloop._exceptions import ConfigurationError

from ._endpoints import ENDPOINTS
from ._regimes import RegimeSpec

__all__ = [
    "DEFAULT_DRIFT",
    "DriftSpec",
    "EndpointFaults",
    "FixedLatency",
    "LatencyModel",
    "LognormalLatency",
    "Outage",
    "SlowPeriod",
    "UniformLatency",
    "WorldFaultProfile",
    "format_validation_error",
    "load_profile",
    "load_profile_file",
    "named_profiles",
    "with_onset_rate",
]

Rate = Annotated[float, Field(ge=0.0, le=1.0)]
Millis = Annotated[float, Field(ge=0.0, le=600_000.0)]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class FixedLatency(_Model):
    """Every request takes ``ms`` milliseconds."""

    kind: Literal["fixed"] = "fixed"
    ms: Millis


class UniformLatency(_Model):
    """Latency uniform in [``low_ms``, ``high_ms``] (the ``seed000`` profile: 200–800 ms)."""

    kind: Literal["uniform"] = "uniform"
    low_ms: Millis
    high_ms: Millis

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.high_ms < self.low_ms:
            raise ValueError("high_ms must be >= low_ms")
        return self


class LognormalLatency(_Model):
    """Log-normal latency with median ``median_ms``, shape ``sigma``, capped at ``cap_ms``."""

    kind: Literal["lognormal"] = "lognormal"
    median_ms: Millis
    sigma: Annotated[float, Field(ge=0.0, le=5.0)] = 0.5
    cap_ms: Millis = 30_000.0


LatencyModel = Annotated[
    FixedLatency | UniformLatency | LognormalLatency, Field(discriminator="kind")
]


class _Window(_Model):
    """[``start``, ``end``) in per-endpoint request indices (deterministic) or in seconds
    since the world started (or was reset); repeats every ``every`` units if set."""

    unit: Literal["requests", "seconds"] = "requests"
    start: Annotated[float, Field(ge=0.0)]
    end: Annotated[float, Field(gt=0.0)]
    every: Annotated[float, Field(gt=0.0)] | None = None

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.end <= self.start:
            raise ValueError("end must be > start")
        if self.every is not None and self.every < self.end - self.start:
            raise ValueError("every must be >= end - start (windows may not overlap)")
        return self

    def contains(self, index: int, elapsed_s: float) -> bool:
        """Whether the request with this index, at this time, falls in the window."""
        x = float(index) if self.unit == "requests" else elapsed_s
        if x < self.start:
            return False
        if self.every is not None:
            x = self.start + (x - self.start) % self.every
        return x < self.end


class Outage(_Window):
    """Every request in the window fails with ``status`` (and ``Retry-After`` if set)."""

    status: Annotated[int, Field(ge=500, le=599)] = 503
    retry_after_s: Annotated[float, Field(ge=0.0)] | None = None


class SlowPeriod(_Window):
    """Requests in the window take ``factor`` times longer, plus ``extra_ms``."""

    factor: Annotated[float, Field(ge=1.0, le=1000.0)] = 3.0
    extra_ms: Millis = 0.0


class DriftSpec(_Model):
    """Schema drift: keys renamed and keys dropped, in the body and in its list items."""

    renames: dict[str, str] = Field(default_factory=dict)
    drops: tuple[str, ...] = ()


# The drift each read endpoint shows when a profile does not say: realistic renames.
DEFAULT_DRIFT: Mapping[str, DriftSpec] = {
    "cities": DriftSpec(renames={"name_en": "english_name"}),
    "weather": DriftSpec(renames={"temperature_c": "temp_c"}, drops=("humidity_pct",)),
    "flights": DriftSpec(renames={"price_cny": "price", "depart_time": "departure"}),
    "bookings_get": DriftSpec(renames={"status": "state"}),
    "payments_get": DriftSpec(renames={"amount_cny": "amount"}),
    "rooms": DriftSpec(renames={"capacity": "seats"}),
    "room_slots": DriftSpec(renames={"free_slots": "slots"}),
    "products": DriftSpec(renames={"price_cny": "price"}),
    "orders_list": DriftSpec(renames={"status": "order_status"}),
    "orders_get": DriftSpec(renames={"status": "order_status"}, drops=("tracking",)),
    "documents": DriftSpec(renames={"quarter": "period"}),
    "documents_get": DriftSpec(renames={"text": "content"}),
}


class EndpointFaults(_Model):
    """The faults of one endpoint (or the default for all). Rates are probabilities."""

    latency: LatencyModel | None = None
    error_rate: Rate = 0.0
    error_statuses: tuple[Annotated[int, Field(ge=500, le=599)], ...] = Field(
        default=(500, 503), min_length=1
    )
    rate_limit_rate: Rate = 0.0
    retry_after_s: Annotated[float, Field(ge=0.0, le=3600.0)] = 1.0
    empty_rate: Rate = 0.0
    drift_rate: Rate = 0.0
    drift: DriftSpec | None = None
    commit_then_fail_rate: Rate = 0.0
    commit_then_fail_status: Annotated[int, Field(ge=500, le=599)] = 503
    outages: tuple[Outage, ...] = ()
    slow_periods: tuple[SlowPeriod, ...] = ()

    @model_validator(mode="after")
    def _rates_sum(self) -> Self:
        total = (
            self.rate_limit_rate
            + self.error_rate
            + self.empty_rate
            + self.drift_rate
            + self.commit_then_fail_rate
        )
        if total > 1.0 + 1e-9:
            raise ValueError(f"the outcome rates sum to {total:.3f}; they must sum to <= 1")
        return self


class WorldFaultProfile(_Model):
    """A named set of faults: ``default`` for every endpoint, ``endpoints`` overriding it.

    Keys of ``endpoints`` are endpoint names (``closedloop_bench.world.ENDPOINTS``).
    ``regimes`` adds disturbances with memory: per-service spells of degraded service,
    outages and 429 storms, and schema drift that starts mid-episode and stays.
    """

    name: Annotated[str, Field(min_length=1, max_length=64)] = "custom"
    description: str = ""
    default: EndpointFaults = EndpointFaults()
    endpoints: dict[str, EndpointFaults] = Field(default_factory=dict)
    regimes: RegimeSpec | None = None

    @model_validator(mode="after")
    def _known_endpoints(self) -> Self:
        unknown = sorted(set(self.endpoints) - set(ENDPOINTS))
        if unknown:
            raise ValueError(
                f"unknown endpoint(s) {unknown}; known: {', '.join(sorted(ENDPOINTS))}"
            )
        for name in self.endpoints:
            self.for_endpoint(name)  # the merged settings must be valid too
        return self

    def for_endpoint(self, name: str) -> EndpointFaults:
        """The effective faults of endpoint ``name``: the default, then its override."""
        if name not in ENDPOINTS:
            raise ConfigurationError("endpoint", name, f"known: {', '.join(sorted(ENDPOINTS))}")
        override = self.endpoints.get(name)
        if override is None:
            return self.default
        merged: dict[str, Any] = dict(self.default)
        merged.update({field: getattr(override, field) for field in override.model_fields_set})
        try:
            return EndpointFaults.model_validate(merged)
        except ValidationError as exc:
            raise ValueError(f"endpoints.{name}: {format_validation_error(exc)}") from None


def _seed000() -> WorldFaultProfile:
    return WorldFaultProfile(
        name="seed000",
        description=(
            "The PID/ADRC article's test bench: 200-800 ms uniform latency and 10 % failed calls "
            "(500 or 503) on every endpoint."
        ),
        default=EndpointFaults(
            latency=UniformLatency(low_ms=200.0, high_ms=800.0),
            error_rate=0.10,
            error_statuses=(500, 503),
        ),
    )


def _harsh() -> WorldFaultProfile:
    return WorldFaultProfile(
        name="harsh",
        description=(
            "Everything at once: heavy-tailed latency, 8 % errors, 5 % 429s, 4 % empty "
            "answers, 4 % schema drift, an outage on requests 40-49 of every endpoint, a "
            "slow period of 30 s in every 120 s, and effects that commit then fail (4 %)."
        ),
        default=EndpointFaults(
            latency=LognormalLatency(median_ms=350.0, sigma=0.6, cap_ms=8000.0),
            error_rate=0.08,
            error_statuses=(500, 502, 503),
            rate_limit_rate=0.05,
            retry_after_s=1.0,
            empty_rate=0.04,
            drift_rate=0.04,
            commit_then_fail_rate=0.04,
            outages=(Outage(unit="requests", start=40, end=50),),
            slow_periods=(SlowPeriod(unit="seconds", start=30, end=60, every=120, factor=4.0),),
        ),
    )


def _regimes() -> WorldFaultProfile:
    return WorldFaultProfile(
        name="regimes",
        description=(
            "Disturbances with memory: 200-800 ms latency and 2 % independent errors, and per "
            "service a chain of spells (onset rate 0.08 per request; degraded ~6 requests with "
            "30 % errors and latency ramping to 4x, down ~3, 429 storms ~3; a degraded spell "
            "ends down in 3 of 10)."
        ),
        default=EndpointFaults(
            latency=UniformLatency(low_ms=200.0, high_ms=800.0),
            error_rate=0.02,
            error_statuses=(500, 503),
        ),
        regimes=RegimeSpec(onset_rate=0.08),
    )


def named_profiles() -> dict[str, WorldFaultProfile]:
    """The built-in profiles by name: ``none``, ``seed000``, ``harsh``, ``regimes``."""
    return {
        "none": WorldFaultProfile(name="none", description="No faults: the world as designed."),
        "seed000": _seed000(),
        "harsh": _harsh(),
        "regimes": _regimes(),
    }


def with_onset_rate(profile: WorldFaultProfile, onset_rate: float) -> WorldFaultProfile:
    """``profile`` with its regimes' onset rate λ set (regimes added if it had none): one
    point of a fault-rate sweep. λ outside [0, 1] is refused, naming the value."""
    if isinstance(onset_rate, bool) or not isinstance(onset_rate, int | float):
        raise ConfigurationError("onset_rate", onset_rate, "must be a number in [0, 1]")
    if not (math.isfinite(onset_rate) and 0.0 <= onset_rate <= 1.0):
        raise ConfigurationError("onset_rate", onset_rate, "λ must lie in [0, 1]")
    spec = profile.regimes or RegimeSpec()
    return profile.model_copy(
        update={
            "name": f"{profile.name}@{onset_rate:g}",
            "regimes": spec.model_copy(update={"onset_rate": float(onset_rate)}),
        }
    )


def format_validation_error(exc: ValidationError, limit: int = 5) -> str:
    """pydantic's errors as ``field.path: message`` lines joined by ``; ``."""
    parts = []
    for err in exc.errors()[:limit]:
        loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
        parts.append(f"{loc}: {err['msg']}")
    more = len(exc.errors()) - limit
    if more > 0:
        parts.append(f"and {more} more")
    return "; ".join(parts)


def load_profile_file(path: str | Path) -> WorldFaultProfile:
    """Read a custom profile from a ``.json`` or ``.toml`` file.

    A bad file raises ``ConfigurationError`` whose message names the offending field.
    """
    p = Path(path)
    if p.suffix.lower() not in (".json", ".toml"):
        raise ConfigurationError("faults_file", str(p), "must end in .json or .toml")
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise ConfigurationError("faults_file", str(p), f"cannot be read: {exc}") from None
    try:
        data = tomllib.loads(raw.decode()) if p.suffix.lower() == ".toml" else json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError and TOMLDecodeError
        raise ConfigurationError("faults_file", str(p), f"not valid {p.suffix}: {exc}") from None
    if isinstance(data, dict):
        data.setdefault("name", p.stem)
    try:
        return WorldFaultProfile.model_validate(data)
    except ValidationError as exc:
        raise ConfigurationError("faults_file", str(p), format_validation_error(exc)) from None


def load_profile(profile: str | Path | WorldFaultProfile) -> WorldFaultProfile:
    """A profile by built-in name, from a file path, or as given; ``NAME@λ`` is that
    profile with its regimes' onset rate set to λ (``regimes@0.2``; see
    :func:`with_onset_rate`)."""
    if isinstance(profile, WorldFaultProfile):
        return profile
    if isinstance(profile, Path):
        return load_profile_file(profile)
    if isinstance(profile, str):
        named = named_profiles()
        if profile in named:
            return named[profile]
        base, at, rate = profile.rpartition("@")
        if at and base:
            # ``name@λ``: the profile with its regimes' onset rate λ (one point of a sweep).
            try:
                onset_rate = float(rate)
            except ValueError:
                raise ConfigurationError(
                    "profile", profile, f"the onset rate after '@' must be a number, not {rate!r}"
                ) from None
            return with_onset_rate(load_profile(base), onset_rate)
        if profile.lower().endswith((".json", ".toml")):
            return load_profile_file(profile)
        raise ConfigurationError(
            "profile", profile, f"unknown profile; known: {', '.join(named)} (or a file path)"
        )
    raise ConfigurationError("profile", profile, "must be a name, a path or a WorldFaultProfile")
