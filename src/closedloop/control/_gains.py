"""Per-domain gains: gain scheduling by task family (Åström & Hägglund, *Advanced PID Control*).

A :class:`GainTable` maps a task family (a domain key) to a :class:`Gains` row: the
PID's ``kp``/``ki``/``kd`` and the regression ESO's bandwidth (its window and the samples
it needs before it estimates). It always has a ``default`` row for keys it does not know.
A :class:`GainPredictor` picks a row from a query's features instead: the nearest
development queries vote for the candidate that served them best.

:func:`choose_gains` is the run-time decision: a table or predictor that is missing,
older than ``max_age_s`` or broken yields the fixed gains and a warning that says why.
JSON goes through pydantic at the boundary (``to_json`` / ``from_json``); nothing here
reads files or clocks (``now`` is an argument).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .._exceptions import ConfigurationError
from .._validation import require_finite, require_int_at_least

__all__ = [
    "DEFAULT_GAIN_KEY",
    "GAIN_LIMITS",
    "GainChoice",
    "GainPredictor",
    "GainTable",
    "Gains",
    "choose_gains",
]

DEFAULT_GAIN_KEY = "default"
"""The row a table uses for every key it has no row of."""

GAIN_LIMITS: Mapping[str, tuple[float, float]] = MappingProxyType(
    {
        "kp": (0.0, 5.0),
        "ki": (0.0, 2.0),
        "kd": (0.0, 5.0),
        "eso_window": (2.0, 200.0),
        "eso_min_samples": (1.0, 50.0),
    }
)
"""The accepted range of every gain; a row outside it is rejected, not clipped."""


def _in_range(name: str, value: float) -> float:
    low, high = GAIN_LIMITS[name]
    v = require_finite(name, value)
    if not low <= v <= high:
        raise ConfigurationError(name, value, f"must be in [{low:g}, {high:g}]")
    return v


@dataclass(frozen=True, slots=True, kw_only=True)
class Gains:
    """One row: PID gains and the ESO's window (its bandwidth: a shorter window reacts
    faster and forgets sooner) and the samples it needs before it estimates."""

    kp: float = 0.8
    ki: float = 0.05
    kd: float = 0.3
    eso_window: int = 15
    eso_min_samples: int = 5

    def __post_init__(self) -> None:
        for name in ("kp", "ki", "kd"):
            object.__setattr__(self, name, _in_range(name, getattr(self, name)))
        for name in ("eso_window", "eso_min_samples"):
            value = getattr(self, name)
            require_int_at_least(name, value, 1)
            _in_range(name, float(value))
        if self.eso_window < self.eso_min_samples:
            raise ConfigurationError(
                "eso_window",
                self.eso_window,
                f"must be >= eso_min_samples ({self.eso_min_samples})",
            )

    def as_dict(self) -> dict[str, float | int]:
        """The gains and the ESO window sizes as a plain dict."""
        return {
            "kp": self.kp,
            "ki": self.ki,
            "kd": self.kd,
            "eso_window": self.eso_window,
            "eso_min_samples": self.eso_min_samples,
        }


class _GainsModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    kp: float
    ki: float
    kd: float
    eso_window: int
    eso_min_samples: int


class _TableModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: Literal["gain_table"] = "gain_table"
    created_at: float
    note: str = ""
    rows: dict[str, _GainsModel] = Field(min_length=1)


class _PredictorModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: Literal["gain_predictor"] = "gain_predictor"
    created_at: float
    note: str = ""
    k: int
    candidates: list[_GainsModel] = Field(min_length=1)
    points: list[list[float]]
    scores: list[list[float]]
    fallback: _GainsModel


_M = TypeVar("_M", bound=BaseModel)


def _model(g: Gains) -> _GainsModel:
    return _GainsModel(
        kp=g.kp, ki=g.ki, kd=g.kd, eso_window=g.eso_window, eso_min_samples=g.eso_min_samples
    )


def _gains(model: _GainsModel) -> Gains:
    return Gains(**model.model_dump())


def _parse(cls: type[_M], text: str | bytes) -> _M:
    try:
        return cls.model_validate_json(text)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise ConfigurationError("gains", where, first["msg"]) from None


@dataclass(frozen=True, slots=True)
class GainTable:
    """Gains per domain key, with a ``default`` row; ``created_at`` is when it was tuned."""

    rows: Mapping[str, Gains]
    created_at: float
    note: str = ""

    def __post_init__(self) -> None:
        rows = dict(self.rows)
        if DEFAULT_GAIN_KEY not in rows:
            raise ConfigurationError("rows", sorted(rows), "must hold a 'default' row")
        for key, row in rows.items():
            if not isinstance(key, str) or not key:
                raise ConfigurationError("rows", key, "keys must be non-empty strings")
            if not isinstance(row, Gains):
                raise ConfigurationError(f"rows[{key}]", row, "must be Gains")
        require_finite("created_at", self.created_at)
        object.__setattr__(self, "rows", MappingProxyType(rows))

    def gains_for(self, key: str | None) -> tuple[Gains, str]:
        """The row for ``key`` and the key it came from (``default`` when unknown)."""
        if key is not None and key in self.rows:
            return self.rows[key], key
        return self.rows[DEFAULT_GAIN_KEY], DEFAULT_GAIN_KEY

    def with_row(self, key: str, gains: Gains) -> GainTable:
        """A copy of the table with row ``key`` set to ``gains`` (added or replaced)."""
        return GainTable({**self.rows, key: gains}, self.created_at, self.note)

    def to_json(self) -> str:
        """The table as JSON text, rows sorted by key (``from_json`` reads it back)."""
        model = _TableModel(
            created_at=self.created_at,
            note=self.note,
            rows={k: _model(v) for k, v in sorted(self.rows.items())},
        )
        return model.model_dump_json(indent=2)

    @classmethod
    def from_json(cls, text: str | bytes) -> GainTable:
        """Parse and range-check a table; any problem is a ``ConfigurationError``."""
        model = _parse(_TableModel, text)
        return cls({k: _gains(v) for k, v in model.rows.items()}, model.created_at, model.note)


def _distance(a: Sequence[float], b: Sequence[float]) -> float:
    return math.fsum((x - y) ** 2 for x, y in zip(a, b, strict=True))


@dataclass(frozen=True, slots=True)
class GainPredictor:
    """k-nearest-neighbour gains from query features.

    ``points[i]`` is the feature vector of development query i and ``scores[i][j]`` how
    well candidate j served it (success, 0..1). A new query's ``k`` nearest points vote:
    the candidate with the highest mean score wins (ties: the lower index, so the first
    candidate, usually the fixed gains, is the default).
    """

    candidates: tuple[Gains, ...]
    points: tuple[tuple[float, ...], ...]
    scores: tuple[tuple[float, ...], ...]
    fallback: Gains
    created_at: float
    k: int = 5
    note: str = ""
    dims: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        if not self.candidates:
            raise ConfigurationError("candidates", self.candidates, "name at least one")
        require_int_at_least("k", self.k, 1)
        require_finite("created_at", self.created_at)
        if len(self.points) != len(self.scores):
            raise ConfigurationError("scores", len(self.scores), "need one row per point")
        dims = len(self.points[0]) if self.points else 0
        for point, score in zip(self.points, self.scores, strict=True):
            if len(point) != dims:
                raise ConfigurationError("points", point, f"must all have {dims} features")
            if len(score) != len(self.candidates):
                raise ConfigurationError("scores", score, "need one score per candidate")
            for x in (*point, *score):
                require_finite("points/scores", x)
        object.__setattr__(self, "points", tuple(tuple(map(float, p)) for p in self.points))
        object.__setattr__(self, "scores", tuple(tuple(map(float, s)) for s in self.scores))
        object.__setattr__(self, "candidates", tuple(self.candidates))
        object.__setattr__(self, "dims", dims)

    def predict(self, features: Sequence[float]) -> Gains:
        """The gains the nearest development queries vote for (``fallback`` if none)."""
        if not self.points:
            return self.fallback
        if len(features) != self.dims:
            raise ConfigurationError("features", list(features), f"must have {self.dims} values")
        ranked = sorted(range(len(self.points)), key=lambda i: _distance(self.points[i], features))
        near = ranked[: self.k]
        means = [
            math.fsum(self.scores[i][j] for i in near) / len(near)
            for j in range(len(self.candidates))
        ]
        best = max(range(len(means)), key=lambda j: (means[j], -j))
        return self.candidates[best]

    def to_json(self) -> str:
        """The predictor as JSON text (``from_json`` reads it back)."""
        model = _PredictorModel(
            created_at=self.created_at,
            note=self.note,
            k=self.k,
            candidates=[_model(c) for c in self.candidates],
            points=[list(p) for p in self.points],
            scores=[list(s) for s in self.scores],
            fallback=_model(self.fallback),
        )
        return model.model_dump_json()

    @classmethod
    def from_json(cls, text: str | bytes) -> GainPredictor:
        """Parse and check a predictor; any problem is a ``ConfigurationError``."""
        m = _parse(_PredictorModel, text)
        return cls(
            tuple(_gains(c) for c in m.candidates),
            tuple(tuple(p) for p in m.points),
            tuple(tuple(s) for s in m.scores),
            _gains(m.fallback),
            m.created_at,
            m.k,
            m.note,
        )


@dataclass(frozen=True, slots=True)
class GainChoice:
    """The gains a run gets, where they came from, and why not the table (if so)."""

    gains: Gains
    source: str
    warning: str | None = None


def choose_gains(
    adaptive: GainTable | GainPredictor | None,
    fixed: Gains,
    *,
    key: str | None = None,
    features: Sequence[float] | None = None,
    now: float | None = None,
    max_age_s: float | None = None,
) -> GainChoice:
    """Pick the gains for one run, falling back to ``fixed`` with a warning.

    A table answers by ``key``; a predictor by ``features``. Missing (None), stale (older
    than ``max_age_s`` at ``now``, or dated in the future) and unusable sources all give
    ``fixed``.
    """
    if adaptive is None:
        return GainChoice(fixed, "fixed")
    kind = "gain table" if isinstance(adaptive, GainTable) else "gain predictor"
    if max_age_s is not None and now is not None:
        age = now - adaptive.created_at
        if age > max_age_s or age < 0:
            why = f"{kind} is stale (age {age:.0f} s, limit {max_age_s:.0f} s): fixed gains"
            return GainChoice(fixed, "fixed", why)
    if isinstance(adaptive, GainTable):
        gains, row = adaptive.gains_for(key)
        return GainChoice(gains, f"table:{row}")
    if features is None:
        return GainChoice(fixed, "fixed", "gain predictor given no query features: fixed gains")
    try:
        return GainChoice(adaptive.predict(features), "predictor")
    except ConfigurationError as exc:
        return GainChoice(fixed, "fixed", f"gain predictor failed ({exc}): fixed gains")
