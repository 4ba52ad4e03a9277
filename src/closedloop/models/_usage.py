"""Token usage and cost: per-model prices, a thread-safe meter, and a per-run scope."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from types import MappingProxyType

from pydantic import BaseModel, ConfigDict, Field

from .._validation import require_non_negative
from ._completion import Completion, Usage

__all__ = [
    "FREE",
    "PRICES",
    "ModelUsage",
    "Price",
    "RunUsage",
    "UsageMeter",
    "current_usage_meter",
    "price_for",
    "usage_scope",
]


@dataclass(frozen=True, slots=True)
class Price:
    """US dollars per million prompt (input) and completion (output) tokens."""

    input_per_mtok: float
    output_per_mtok: float

    def __post_init__(self) -> None:
        require_non_negative("input_per_mtok", self.input_per_mtok)
        require_non_negative("output_per_mtok", self.output_per_mtok)

    def cost(self, usage: Usage) -> float:
        """The cost of ``usage`` at these per-million-token prices."""
        return (
            usage.prompt_tokens * self.input_per_mtok
            + usage.completion_tokens * self.output_per_mtok
        ) / 1e6


FREE = Price(0.0, 0.0)
"""Local models: the electricity is on you."""

# List prices (USD per 1M tokens, standard tier) as published when this table was written;
# pass ``price=`` to ``load_model`` to override for a contract or a newer price.
PRICES: Mapping[str, Price] = MappingProxyType(
    {
        "gpt-4o-mini": Price(0.15, 0.60),
        "gpt-4o": Price(2.50, 10.00),
        "gpt-4.1-nano": Price(0.10, 0.40),
        "gpt-4.1-mini": Price(0.40, 1.60),
        "gpt-4.1": Price(2.00, 8.00),
        "o4-mini": Price(1.10, 4.40),
        "gpt-3.5-turbo": Price(0.50, 1.50),
    }
)
"""List prices of OpenAI models (USD per million tokens in and out), used by ``load_model``."""


def price_for(model: str, table: Mapping[str, Price] = PRICES) -> Price | None:
    """The price of ``model``: exact match, else the longest table key that prefixes it
    (dated snapshots such as ``gpt-4o-mini-2024-07-18``); None when unknown."""
    if model in table:
        return table[model]
    matches = [key for key in table if model.startswith(key + "-")]
    return table[max(matches, key=len)] if matches else None


class ModelUsage(BaseModel):
    """Totals for one model (or for a whole run)."""

    model_config = ConfigDict(frozen=True)
    calls: int = Field(default=0, ge=0)
    errors: int = Field(default=0, ge=0)
    prompt_tokens: int = Field(default=0, ge=0)
    completion_tokens: int = Field(default=0, ge=0)
    cost_usd: float = Field(default=0.0, ge=0.0)
    unpriced_calls: int = Field(default=0, ge=0)
    latency_s: float = Field(default=0.0, ge=0.0)

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class RunUsage(BaseModel):
    """A meter's snapshot: the total and a breakdown by model name."""

    model_config = ConfigDict(frozen=True)
    total: ModelUsage = ModelUsage()
    by_model: dict[str, ModelUsage] = Field(default_factory=dict)


class _Tally:
    __slots__ = (
        "calls",
        "completion_tokens",
        "cost_usd",
        "errors",
        "latency_s",
        "prompt_tokens",
        "unpriced_calls",
    )

    def __init__(self) -> None:
        self.calls = self.errors = self.prompt_tokens = self.completion_tokens = 0
        self.unpriced_calls = 0
        self.cost_usd = self.latency_s = 0.0

    def frozen(self) -> ModelUsage:
        return ModelUsage(**{name: getattr(self, name) for name in self.__slots__})


class UsageMeter:
    """Accumulates usage and cost across calls; safe to share between threads and tasks."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_model: dict[str, _Tally] = {}

    def record(self, completion: Completion) -> None:
        """Add one successful call."""
        with self._lock:
            tally = self._by_model.setdefault(completion.model, _Tally())
            tally.calls += 1
            tally.prompt_tokens += completion.usage.prompt_tokens
            tally.completion_tokens += completion.usage.completion_tokens
            tally.latency_s += completion.latency_s
            if completion.cost_usd is None:
                tally.unpriced_calls += 1
            else:
                tally.cost_usd += completion.cost_usd

    def record_error(self, model: str) -> None:
        """Count a call that raised."""
        with self._lock:
            self._by_model.setdefault(model, _Tally()).errors += 1

    def snapshot(self) -> RunUsage:
        """An immutable copy of the totals so far."""
        with self._lock:
            by_model = {name: tally.frozen() for name, tally in sorted(self._by_model.items())}
        total = ModelUsage(
            calls=sum(u.calls for u in by_model.values()),
            errors=sum(u.errors for u in by_model.values()),
            prompt_tokens=sum(u.prompt_tokens for u in by_model.values()),
            completion_tokens=sum(u.completion_tokens for u in by_model.values()),
            cost_usd=sum(u.cost_usd for u in by_model.values()),
            unpriced_calls=sum(u.unpriced_calls for u in by_model.values()),
            latency_s=sum(u.latency_s for u in by_model.values()),
        )
        return RunUsage(total=total, by_model=by_model)

    @property
    def total(self) -> ModelUsage:
        return self.snapshot().total

    def reset(self) -> None:
        """Forget every model's counts."""
        with self._lock:
            self._by_model.clear()

    def __repr__(self) -> str:
        t = self.total
        return (
            f"UsageMeter(calls={t.calls}, errors={t.errors}, tokens={t.total_tokens}, "
            f"cost_usd={t.cost_usd:.6f})"
        )


_current: ContextVar[UsageMeter | None] = ContextVar("closedloop_usage_meter", default=None)


def current_usage_meter() -> UsageMeter | None:
    """The meter of the innermost ``usage_scope`` around this code, if any."""
    return _current.get()


@contextmanager
def usage_scope(meter: UsageMeter | None = None) -> Iterator[UsageMeter]:
    """Every model call inside the block (and in tasks it starts) also records into
    ``meter`` (a fresh one by default): the usage and cost of one run."""
    active = meter if meter is not None else UsageMeter()
    token = _current.set(active)
    try:
        yield active
    finally:
        _current.reset(token)
