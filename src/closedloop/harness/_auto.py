"""The PID-or-self-refine chooser as a strategy, and strategies by name.

:func:`auto` runs round 1, then picks self-refine or PID feedback from the first
round's pass rate and failure pattern (:func:`~closedloop.harness.choose_strategy`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from .._exceptions import ConfigurationError
from ._adaptive import IntensityMemory
from ._diagnosis import choose_strategy
from ._focused import focused_feedback
from ._interval import interval
from ._results import RefinementRound
from ._strategies import (
    Feedback,
    PIDFeedback,
    SelfRefine,
    Strategy,
    StrategyContext,
    StrategySession,
    blind_retry,
    pid_feedback,
    self_refine,
)
from ._tasks import CodeTask

__all__ = ["Auto", "auto", "strategy_from_spec"]


@dataclass(frozen=True, slots=True)
class Auto:
    """Runs round 1, then picks self-refine or PID feedback with :func:`choose_strategy`."""

    pid: PIDFeedback = field(default_factory=PIDFeedback)
    easy_above: float = 0.7

    @property
    def name(self) -> str:
        return "auto"

    def start(self, task: CodeTask) -> StrategySession:
        """A refinement session of this strategy for ``task``."""
        return _AutoSession(self, task)


@dataclass(slots=True)
class _AutoSession:
    config: Auto
    task: CodeTask
    chosen: StrategySession | None = None
    choice: str | None = None

    def evaluates(self, round: int) -> bool:
        return True

    def observe(self, rnd: RefinementRound) -> None:
        if self.chosen is not None:
            self.chosen.observe(rnd)

    def feedback(self, ctx: StrategyContext) -> Feedback:
        if self.chosen is None:
            first = ctx.history[0].evaluation
            if first is None:
                raise ConfigurationError("history", ctx.history, "round 1 must be evaluated")
            decision = choose_strategy(first, ctx.task, easy_above=self.config.easy_above)
            self.choice = f"{decision.strategy}: {decision.reason}"
            chosen: Strategy = (
                self.config.pid if decision.strategy == "pid_feedback" else SelfRefine()
            )
            self.chosen = chosen.start(ctx.task)
        return self.chosen.feedback(ctx)


def auto(pid: PIDFeedback | None = None, *, easy_above: float = 0.7) -> Auto:
    """The PID-or-self-refine chooser as a strategy."""
    return Auto(PIDFeedback() if pid is None else pid, easy_above)


def _aggressive() -> Strategy:
    return pid_feedback(aggressive=True)


def _adaptive() -> Strategy:
    return pid_feedback(memory=IntensityMemory())


_BASES: dict[str, Callable[[], Strategy]] = {
    "blind_retry": blind_retry,
    "self_refine": self_refine,
    "pid": pid_feedback,
    "pid_feedback": pid_feedback,
    "pid_aggressive": _aggressive,
    "pid_adaptive": _adaptive,
    "auto": auto,
    "focused": focused_feedback,
}


def strategy_from_spec(spec: str) -> Strategy:
    """A strategy from its name: ``blind_retry``, ``self_refine``, ``pid``, ``pid_aggressive``,
    ``pid_adaptive`` (with an :class:`IntensityMemory` of its own), ``auto``, each optionally
    followed by ``+intervalN`` (``pid+interval2``); ``blind_retry@T`` samples rounds 2 and
    later at temperature ``T``."""
    base, _, modifier = spec.strip().partition("+")
    base, at, temperature = base.partition("@")
    if at:
        if base != "blind_retry":
            raise ConfigurationError("strategy", spec, "only blind_retry takes @TEMPERATURE")
        try:
            value = float(temperature)
        except ValueError:
            raise ConfigurationError(
                "strategy", spec, "@TEMPERATURE must be a number, e.g. blind_retry@0.6"
            ) from None
        blind: Strategy = blind_retry(value)
        return _with_modifier(blind, modifier, spec)
    factory = _BASES.get(base)
    if factory is None:
        raise ConfigurationError("strategy", spec, f"unknown; known: {', '.join(_BASES)}")
    return _with_modifier(factory(), modifier, spec)


def _with_modifier(strategy: Strategy, modifier: str, spec: str) -> Strategy:
    if modifier:
        n = modifier.removeprefix("interval")
        if not modifier.startswith("interval") or not n.isdigit() or int(n) < 1:
            raise ConfigurationError("strategy", spec, "the only modifier is +intervalN, N >= 1")
        strategy = interval(int(n), strategy)
    return strategy
