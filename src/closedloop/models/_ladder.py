"""A model ladder: an ordered cascade of models, cheapest first.

A step runs on the cheapest rung its controller allows and climbs only when its measured
error says so, as in the cascades of FrugalGPT (Chen et al. 2023) and the routers of
RouteLLM (Ong et al. 2024); here the signal that moves a step up or down is the loop's
own measured error, not a learned router. Each rung may carry a price (US dollars per
1,000 tokens, prompt and completion together) that replaces the model's own when a call
is charged, so the cost per rung can be compared where the models are free to run.

Every rung is resolved and checked when the ladder is built: a spec that does not parse,
a rung that cannot be built (a model file that is not there, or not a GGUF model), a
negative price, all
raise :class:`~closedloop.ConfigurationError` naming ``model[i]`` and the value, before
any model is called.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .._exceptions import ConfigurationError, ModelError
from ._protocol import Model
from ._spec import load_model

__all__ = ["ModelLadder", "Rung"]


@dataclass(frozen=True, slots=True)
class Rung:
    """One rung: a model and its optional price per 1,000 tokens."""

    model: Model
    price: float | None = None

    @property
    def name(self) -> str:
        return self.model.name

    def cost(self, prompt_tokens: int, completion_tokens: int, own: float | None) -> float:
        """A call's cost on this rung: its price where it has one, else the model's own."""
        if self.price is None:
            return own or 0.0
        return self.price * (prompt_tokens + completion_tokens) / 1000.0


def _check_file(model: Model, field: str, value: object) -> Model:
    """A local model whose file is not a GGUF model would fail only at its first call:
    its four magic bytes are read now, so the ladder is refused before any call."""
    path = getattr(model, "path", None)
    if isinstance(path, Path):
        try:
            with path.open("rb") as f:
                magic = f.read(4)
        except OSError as exc:
            raise ConfigurationError(field, value, f"the rung cannot be loaded: {exc}") from exc
        if magic != b"GGUF":
            raise ConfigurationError(
                field, value, f"the rung cannot be loaded: {path} is not a GGUF model file"
            )
    return model


def _resolve(value: object, field: str) -> Model:
    if isinstance(value, Model):
        return _check_file(value, field, value)
    if not isinstance(value, str):
        raise ConfigurationError(field, value, "must be a Model or a model spec string")
    try:
        model = load_model(value)
    except ConfigurationError as exc:
        raise ConfigurationError(field, value, exc.reason) from exc
    except ModelError as exc:
        raise ConfigurationError(field, value, f"the rung cannot be loaded: {exc}") from exc
    return _check_file(model, field, value)


def _price(value: object, field: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigurationError(field, value, "must be a number of dollars per 1,000 tokens")
    price = float(value)
    if not math.isfinite(price) or price < 0.0:
        raise ConfigurationError(field, value, "must be finite and not negative")
    return price


@dataclass(frozen=True, slots=True)
class ModelLadder:
    """Models ordered from the cheapest to the strongest, each with an optional price.

    ``ModelLadder.of(["local:smollm2-135m", "local:qwen2.5-coder-0.5b"], prices=[0.0, 0.1])``
    resolves the specs (``Model`` values are taken as they are). Rung 0 is where a calm
    step runs; :meth:`rung` clips a scheduled rung to the top of the ladder.
    """

    rungs: tuple[Rung, ...]

    def __post_init__(self) -> None:
        rungs = tuple(self.rungs)
        if not rungs:
            raise ConfigurationError("model", list(rungs), "a model ladder needs at least one rung")
        for i, rung in enumerate(rungs):
            if not isinstance(rung, Rung):
                raise ConfigurationError(f"model[{i}]", rung, "must be a Rung")
        object.__setattr__(self, "rungs", rungs)

    @classmethod
    def of(
        cls,
        models: Sequence[Model | str | Rung] | ModelLadder,
        prices: Sequence[float | None] | None = None,
    ) -> ModelLadder:
        """A ladder from models or specs, cheapest first; ``prices`` one per rung."""
        if isinstance(models, ModelLadder):
            if prices is None:
                return models
            models = [r.model for r in models.rungs]
        if isinstance(models, str | bytes) or not isinstance(models, Sequence):
            raise ConfigurationError("model", models, "a model ladder must be a list of models")
        if not models:
            raise ConfigurationError(
                "model", list(models), "a model ladder needs at least one rung"
            )
        if prices is not None and (
            isinstance(prices, str | bytes)
            or not isinstance(prices, Sequence)
            or len(prices) != len(models)
        ):
            raise ConfigurationError(
                "prices", prices, f"needs one price (or None) per rung ({len(models)})"
            )
        rungs = []
        for i, value in enumerate(models):
            given = None if prices is None else _price(prices[i], f"prices[{i}]")
            if isinstance(value, Rung):
                price = given if given is not None else _price(value.price, f"model[{i}].price")
                rungs.append(Rung(_resolve(value.model, f"model[{i}]"), price))
            else:
                rungs.append(Rung(_resolve(value, f"model[{i}]"), given))
        return cls(tuple(rungs))

    def __len__(self) -> int:
        return len(self.rungs)

    @property
    def top(self) -> int:
        """The index of the strongest rung."""
        return len(self.rungs) - 1

    def index(self, rung: int) -> int:
        """A scheduled rung clipped to the ladder (a schedule knows no ladder's length)."""
        return min(max(0, int(rung)), self.top)

    def rung(self, rung: int) -> Rung:
        """The rung a step scheduled at ``rung`` runs on."""
        return self.rungs[self.index(rung)]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(r.name for r in self.rungs)
