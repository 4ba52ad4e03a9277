"""The step's door to the model: :class:`ModelPort`, the one place a model is called.

Each call is raced against the run's watchers (deadline, budget, cancellation), so it ends
when the run must, not when the call returns. A call changes nothing of the task state:
it charges the run's live budget, and the caller's ``usage`` adds up what it spent for the
step to fold in. A model that cannot compile a response schema is asked loosely from then
on (``grammar_ok``; ``grammar_failure`` says why).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._exceptions import (
    ModelAuthError,
    ModelError,
    ModelLoadError,
    ModelNotAvailableError,
    ModelUnreachableError,
    RealModelCallBlockedError,
    SchemaCompileError,
)
from ..control import ActuatorSettings
from ..models import Completion, Model, ModelLadder, ModelRequest, Rung
from ._inflight import Budget, Watch, race
from ._records import HaltReason, RungUsage, RunUsageSummary
from ._settings import LoopSettings

__all__ = ["FATAL_MODEL_ERRORS", "ModelCall", "ModelPort", "Usage", "new_usage"]

FATAL_MODEL_ERRORS: tuple[type[BaseException], ...] = (
    ModelNotAvailableError,
    ModelLoadError,
    ModelAuthError,
    ModelUnreachableError,
    RealModelCallBlockedError,
)
"""Model errors no further step can cure: they propagate and the run ends with its own
halt (``model_unavailable``, ``model_unreachable``; ``error`` for a blocked real call). A
server that cannot be reached is one of them: the client has already retried the
connection, and a loop of steps that cannot call the model would only end in its step
limit, hiding why."""

Usage = dict[str, float]
"""A step's model usage while it adds up: calls, prompt and completion tokens, cost."""


def new_usage() -> Usage:
    return {"model_calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "cost": 0.0}


@dataclass(frozen=True, slots=True)
class ModelCall:
    """One model call: its completion, or why the run halts, or why the call failed."""

    completion: Completion | None
    halt: HaltReason | None = None
    failure: str | None = None


class ModelPort:
    """Calls a model for the run and charges the call to the run's live budget; the
    caller's ``usage`` adds it up for the task state."""

    def __init__(self, settings: LoopSettings, budget: Budget | None, watch: Watch) -> None:
        self._settings = settings
        self._budget = budget
        self._watch = watch
        # False once a model could not compile a response schema: decode loosely from
        # then on; the validator still checks every reply. ``grammar_failure`` says why.
        self.grammar_ok = True
        self.grammar_failure: str | None = None
        self._single: ModelLadder | None = None

    def _charge(self, completion: Completion, usage: Usage, price: Rung | None = None) -> None:
        u = completion.usage
        cost = (
            completion.cost_usd or 0.0
            if price is None
            else price.cost(u.prompt_tokens, u.completion_tokens, completion.cost_usd)
        )
        usage["model_calls"] += 1
        usage["prompt_tokens"] += u.prompt_tokens
        usage["completion_tokens"] += u.completion_tokens
        usage["cost"] += cost
        if self._budget is not None:
            self._budget.charge(u.total_tokens, cost)

    def budget_left(self) -> tuple[int | None, float | None] | None:
        """What the run's live budget has left (None: the run has none)."""
        b = self._budget
        return None if b is None else (b.tokens_left, b.cost_left)

    async def complete(
        self,
        model: Model,
        messages: Sequence[Mapping[str, str]],
        usage: Usage,
        *,
        schema: Mapping[str, Any] | None,
        tools: Sequence[Mapping[str, Any]] | None,
        seed: int,
        temperature: float,
        max_tokens: int | None = None,
        price: Rung | None = None,
    ) -> ModelCall:
        """One model call raced against the watchers; ``price`` is the ladder rung whose
        price (where it has one) charges the call."""
        watch, budget = self._watch, self._budget
        limit = max_tokens or self._settings.max_tokens
        if budget is not None and budget.tokens_left is not None:
            limit = max(1, min(limit, budget.tokens_left))
        remaining = watch.deadline_s - watch.elapsed()
        call = model.complete(
            [dict(m) for m in messages],
            ModelRequest(
                response_schema=schema if self.grammar_ok else None,
                max_tokens=limit,
                temperature=temperature,
                seed=seed,
                timeout=remaining if remaining > 0 else None,
                tools=tuple(tools or ()),
                logprobs=self._settings.logprobs,
            ),
        )
        try:
            completion, halt = await race(call, watch.watchers())
        except SchemaCompileError as exc:
            self.grammar_ok = False
            self.grammar_failure = f"constrained decoding unavailable: {exc}"
            return await self.complete(
                model,
                messages,
                usage,
                schema=None,
                tools=tools,
                seed=seed,
                temperature=temperature,
                max_tokens=max_tokens,
                price=price,
            )
        except FATAL_MODEL_ERRORS:
            raise
        except ModelError as exc:
            return ModelCall(None, None, f"the model call failed ({type(exc).__name__}: {exc})")
        if completion is not None:
            self._charge(completion, usage, price)
        return ModelCall(completion, halt)

    def ladder(self) -> ModelLadder:
        """The run's model ladder (a single model is a ladder of one rung)."""
        cfg = self._settings
        if cfg.ladder is not None:
            return cfg.ladder
        if self._single is None or self._single.rungs[0].model is not cfg.model:
            self._single = ModelLadder((Rung(cfg.model),))
        return self._single

    def rung_model(self, settings: ActuatorSettings) -> Model:
        """The model a proposal made under ``settings`` runs on."""
        return self.ladder().rung(settings.rung).model

    async def sample(
        self,
        messages: Sequence[Mapping[str, str]],
        *,
        schema: Mapping[str, Any] | None,
        tools: Sequence[Mapping[str, Any]] | None,
        dual: bool,
        step: int,
        settings: ActuatorSettings | None = None,
    ) -> tuple[list[ModelCall], RunUsageSummary]:
        """The proposal's calls, on the ladder's rung ``settings.rung`` (the cheapest by
        default): one sample at the agent's temperature, and ``settings.votes - 1`` more
        at the dual temperature (at least one more under dual verification, from the
        verifier where there is one), all at the same time, seeded by the ``step``. The
        usage is split by rung."""
        cfg = self._settings
        ladder = self.ladder()
        index = 0 if settings is None else ladder.index(settings.rung)
        rung = ladder.rungs[index]
        k = max(2 if dual else 1, 1 if settings is None else settings.votes)
        usage = new_usage()
        seed = cfg.seed + step
        plans = [(rung.model, seed, cfg.temperature)]
        for i in range(1, k):
            model = cfg.verifier if (dual and i == 1 and cfg.verifier is not None) else rung.model
            plans.append((model, seed + 7919 * i, cfg.dual_temperature))
        clock = cfg.clock
        started = clock()
        samples = [
            self.complete(
                model,
                messages,
                usage,
                schema=schema,
                tools=tools,
                seed=s,
                temperature=t,
                price=rung,
            )
            for model, s, t in plans
        ]
        # One sample needs no task of its own to run at the same time as nothing else.
        calls = [await samples[0]] if len(samples) == 1 else list(await asyncio.gather(*samples))
        seconds = max(0.0, clock() - started)
        calls_made = int(usage["model_calls"])
        spent = RungUsage(
            rung=index,
            model=rung.name,
            model_calls=calls_made,
            prompt_tokens=int(usage["prompt_tokens"]),
            completion_tokens=int(usage["completion_tokens"]),
            seconds=seconds,
            cost=usage["cost"],
        )
        summary = RunUsageSummary(
            model_calls=calls_made,
            prompt_tokens=int(usage["prompt_tokens"]),
            completion_tokens=int(usage["completion_tokens"]),
            cost=usage["cost"],
            rungs=[spent],
        )
        return calls, summary
