"""Feedback strategies: what the generator is told between rounds of refinement.

- :func:`blind_retry`: open loop. Every round gets the original prompt and nothing else.
- :func:`self_refine`: feedback with a poor sensor (Self-Refine, Madaan et al. 2023). The
  last code, its pass count, "improve it".
- :func:`pid_feedback`: precise feedback. Failing checks with got / expected, a diagnosis,
  preventive hints about related code paths, and an intensity (light / medium / heavy)
  set by a PID controller on the error ``1 − score``; gains are reduced for an aggressive
  prompt and after a regression. Light and medium feedback come with the best code so far
  to edit; heavy feedback asks for a new implementation and leaves the old code out, so it
  cannot anchor the answer. A small model shown its code
  tends to hand it back unchanged; when it does, the next round is heavy whatever ``u``
  says. ``u`` also sets the sampling temperature (exploration): a small push stays close
  to the model's likeliest answer, a large one (or a push that had no effect) samples
  wider. The wording lives in ``_prompts``.
- :func:`~closedloop.harness.interval` (in ``_interval``) wraps any of them to evaluate
  only every n-th round.

A strategy is a frozen configuration; ``strategy.start(task)`` returns a session that
holds the run's state (the PID controller) and is asked for each round's messages.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from .._exceptions import ConfigurationError
from .._validation import (
    require_int_at_least,
    require_non_negative,
    require_unit_interval,
)
from ..control import PID, FeedbackIntensity, LyapunovVerdict, schedule_feedback_intensity
from ..models import Message
from ._adaptive import IntensityMemory
from ._diagnosis import diagnose
from ._own_temperature import OwnTemperature
from ._prompts import (
    ANSWER,
    PRECISE_ANSWER,
    continue_messages,
    failure_lines,
    fresh_messages,
    initial_messages,
    level_action,
    missing_entry_point,
    same_code,
    skeleton,
)
from ._results import RefinementRound
from ._tasks import CodeTask

__all__ = [
    "BlindRetry",
    "Feedback",
    "PIDFeedback",
    "SelfRefine",
    "Strategy",
    "StrategyContext",
    "StrategySession",
    "blind_retry",
    "pid_feedback",
    "self_refine",
]

_AGGRESSIVE = "Rewrite all related code thoroughly."


@dataclass(frozen=True, slots=True)
class Feedback:
    """What a session asks for the next round: messages, and the control values behind them."""

    messages: tuple[Message, ...]
    text: str | None = None
    control: float | None = None
    level: FeedbackIntensity | None = None
    gains: tuple[float, float, float] | None = None
    facts: str | None = None
    temperature: float | None = None
    """The sampling temperature for this round; None keeps the generator's own."""


@dataclass(frozen=True, slots=True)
class StrategyContext:
    """What a session sees before generating round ``round`` (≥ 2).

    ``history`` holds every earlier round; ``verdict`` is the Lyapunov monitor's reading
    of the latest evaluated round; ``note`` is a model's reading of the failures, when the
    refiner has a diagnoser.
    """

    task: CodeTask
    round: int
    history: tuple[RefinementRound, ...]
    verdict: LyapunovVerdict | None = None
    note: str | None = None

    @property
    def last(self) -> RefinementRound:
        return self.history[-1]

    @property
    def last_evaluated(self) -> RefinementRound | None:
        for r in reversed(self.history):
            if r.evaluation is not None:
                return r
        return None


class StrategySession(Protocol):
    """The per-run side of a strategy."""

    def evaluates(self, round: int) -> bool:
        """Whether round ``round``'s code is evaluated (rounds 1 and the last always are)."""
        ...

    def feedback(self, ctx: StrategyContext) -> Feedback:
        """The messages for round ``ctx.round``."""
        ...

    def observe(self, rnd: RefinementRound) -> None:
        """Round ``rnd`` is done (scored, if it was evaluated): what the feedback achieved."""
        ...


class Strategy(Protocol):
    """A feedback strategy: a name, and a session per run."""

    @property
    def name(self) -> str: ...

    def start(self, task: CodeTask) -> StrategySession:
        """A refinement session of this strategy for ``task``."""


def _score_line(r: RefinementRound) -> str:
    ev = r.evaluation
    if ev is None:
        return "Your code was not tested this round."
    return f"Your code passes {ev.passed} of {ev.total} tests."


# --- blind retry -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BlindRetry(OwnTemperature):
    """Open loop: the original prompt every round; nothing of earlier rounds is passed on.

    ``temperature`` samples rounds 2 and later at a fixed temperature of their own (round
    1 stays the generator's): the open-loop control for a strategy that raises the
    temperature, so that a benchmark can tell wider sampling from feedback.
    """

    @property
    def name(self) -> str:
        return self._named("blind_retry")

    def start(self, task: CodeTask) -> StrategySession:
        """A refinement session of this strategy for ``task``."""
        return _BlindSession(task, self.temperature)


@dataclass(slots=True)
class _BlindSession:
    task: CodeTask
    temperature: float | None = None

    def evaluates(self, round: int) -> bool:
        return True

    def feedback(self, ctx: StrategyContext) -> Feedback:
        return Feedback(messages=initial_messages(ctx.task), temperature=self.temperature)

    def observe(self, rnd: RefinementRound) -> None:
        pass


def blind_retry(temperature: float | None = None) -> BlindRetry:
    """Open-loop retry (the baseline); see :class:`BlindRetry` for ``temperature``."""
    return BlindRetry(temperature)


# --- self-refine -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SelfRefine:
    """The last code, its pass count and "improve it"; no failing tests, no diagnosis."""

    @property
    def name(self) -> str:
        return "self_refine"

    def start(self, task: CodeTask) -> StrategySession:
        """A refinement session of this strategy for ``task``."""
        return _SelfRefineSession(task)


@dataclass(slots=True)
class _SelfRefineSession:
    task: CodeTask

    def evaluates(self, round: int) -> bool:
        return True

    def feedback(self, ctx: StrategyContext) -> Feedback:
        text = f"{_score_line(ctx.last)} Review it and improve it. {ANSWER}"
        return Feedback(messages=continue_messages(ctx.task, ctx.last.code, text), text=text)

    def observe(self, rnd: RefinementRound) -> None:
        pass


def self_refine() -> SelfRefine:
    """Self-refine: feedback without specifics."""
    return SelfRefine()


# --- PID feedback ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PIDFeedback:
    """Precise feedback whose intensity a PID controller sets from the error ``1 − score``.

    Args:
        kp, ki, kd: the gains (0.6, 0.2, 0.15); one round is one sample (``dt=1``).
            The controller is ``closedloop.control.PID`` with derivative on the error, so
            the first feedback has no D term (there is no earlier error): the usual worked
            example (score 0.7) gives u = 0.24 here where taking Δe = e on the first round
            gives 0.285. Both are "light".
        thresholds: u below the first is light, below the second medium, else heavy.
        aggressive: ask for thorough rewrites ("aggressive mode"). The gains
            are then multiplied by ``gain_reduction`` from the start: a stronger push per
            unit of error needs a gentler controller.
        gain_reduction: factor applied to the gains in aggressive mode, and again after
            every round whose ``V`` rose (a regression); 1.0 disables both.
        min_gain_scale: the gains are never scaled below this share of the original.
        max_failures: at most this many failing checks are listed (the rest are counted).
        per_pattern: at most this many examples of one failure pattern are listed.
        hints: at most this many preventive hints at light and medium intensity (one at
            heavy, where the failing checks matter most).
        escalate_on_repeat: when the model hands back a program it already wrote, the
            next feedback is heavy whatever ``u`` says (the push had no effect).
        temperatures: ``(low, high)``: the round's sampling temperature is
            ``low + (high − low)·u``, and ``high`` after a repeated program: a model that
            keeps answering the same has to be sampled wider to answer anything else.
            None leaves the generator's temperature alone.
        target: the score the controller drives toward.
        memory: dead-zone compensation (:class:`IntensityMemory`): every session of this
            strategy records what each intensity achieved, and a level measured to do
            less than a stronger one is sent at the stronger one. None (the default)
            keeps the fixed mapping and makes every task independent.
    """

    kp: float = 0.6
    ki: float = 0.2
    kd: float = 0.15
    thresholds: tuple[float, float] = (0.3, 0.6)
    aggressive: bool = False
    gain_reduction: float = 0.5
    min_gain_scale: float = 0.25
    max_failures: int = 8
    per_pattern: int = 3
    hints: int = 2
    escalate_on_repeat: bool = True
    temperatures: tuple[float, float] | None = (0.2, 0.8)
    target: float = 1.0
    memory: IntensityMemory | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        for name in ("kp", "ki", "kd"):
            require_non_negative(name, getattr(self, name))
        if self.temperatures is not None:
            low, high = _temperature_range(self.temperatures)
            object.__setattr__(self, "temperatures", (low, high))
        if self.memory is not None and not isinstance(self.memory, IntensityMemory):
            raise ConfigurationError("memory", self.memory, "must be an IntensityMemory or None")
        require_unit_interval("gain_reduction", self.gain_reduction)
        require_unit_interval("min_gain_scale", self.min_gain_scale)
        require_int_at_least("max_failures", self.max_failures, 1)
        require_int_at_least("per_pattern", self.per_pattern, 1)
        require_int_at_least("hints", self.hints, 0)
        require_unit_interval("target", self.target)
        schedule_feedback_intensity(self.thresholds)  # validates the thresholds

    @property
    def name(self) -> str:
        name = "pid_aggressive" if self.aggressive else "pid"
        return f"{name}_adaptive" if self.memory is not None else name

    def start(self, task: CodeTask) -> StrategySession:
        """A refinement session of this strategy for ``task``."""
        return _PIDSession(self, task)


@dataclass(slots=True)
class _PIDSession:
    config: PIDFeedback
    task: CodeTask
    scale: float = 1.0
    measured: int = 0
    u: float = 0.0
    best: float | None = None
    pid: PID = field(init=False)

    def __post_init__(self) -> None:
        c = self.config
        if c.aggressive:
            self.scale = max(c.min_gain_scale, c.gain_reduction)
        self.pid = PID(
            *self._gains(),
            setpoint=c.target,
            output_limits=(0.0, 1.0),
            derivative_on="error",
        )

    def _gains(self) -> tuple[float, float, float]:
        c = self.config
        return (c.kp * self.scale, c.ki * self.scale, c.kd * self.scale)

    def evaluates(self, round: int) -> bool:
        return True

    def feedback(self, ctx: StrategyContext) -> Feedback:
        c = self.config
        last = ctx.last_evaluated
        if last is None or last.evaluation is None or last.score is None:
            raise ConfigurationError(
                "history", ctx.history, "PID feedback needs an evaluated round"
            )
        if self.best is None:  # started after round 1 (auto): catch up on the history
            self.best = max((r.score for r in ctx.history if r.score is not None), default=None)
        if last.index > self.measured:
            if ctx.verdict is not None and ctx.verdict.increased and c.gain_reduction < 1.0:
                # A regression: the last push made things worse; push more gently from now on.
                self.scale = max(c.min_gain_scale, self.scale * c.gain_reduction)
                self.pid.tunings = self._gains()
            self.u = self.pid(last.score, dt=1.0)
            self.measured = last.index
        level = schedule_feedback_intensity(c.thresholds)(self.u)
        repeated = c.escalate_on_repeat and _repeated(ctx.history)
        if level is not FeedbackIntensity.HEAVY and repeated:
            # The actuator had no effect: shown its code, the model handed it back. A
            # gentler or equal push would only be copied again, so this round goes heavy.
            level = FeedbackIntensity.HEAVY
        if c.memory is not None:
            level = c.memory.compensate(level)
        heavy = level is FeedbackIntensity.HEAVY
        # Light and medium edit the best code so far (after a regression, not the worse
        # last one); heavy describes the latest failures and shows no code at all.
        base = last if heavy else _best(ctx.history)
        facts, action = self._text(ctx, base, level, ctx.note)
        text = f"{facts}\n{action}"
        temperature = None
        if c.temperatures is not None:
            low, high = c.temperatures
            temperature = high if repeated else low + (high - low) * self.u
        return Feedback(
            messages=fresh_messages(ctx.task, text)
            if heavy
            else continue_messages(ctx.task, base.code, text),
            text=text,
            control=self.u,
            level=level,
            gains=self._gains(),
            facts=facts,
            temperature=temperature,
        )

    def observe(self, rnd: RefinementRound) -> None:
        if rnd.score is None:
            return
        memory = self.config.memory
        if memory is not None and rnd.level is not None and self.best is not None:
            memory.record(FeedbackIntensity(rnd.level), rnd.score > self.best + 1e-12)
        self.best = rnd.score if self.best is None else max(self.best, rnd.score)

    def _examples(self, patterns: Mapping[str, tuple[str, ...]], names: list[str]) -> list[str]:
        """A few failing checks per pattern: a small model reads three examples of one bug
        better than ten."""
        c = self.config
        shown: set[str] = set()
        for group in patterns.values():
            shown.update(group[: c.per_pattern])
        return [n for n in names if n in shown][: c.max_failures]

    def _text(
        self,
        ctx: StrategyContext,
        base: RefinementRound,
        level: FeedbackIntensity,
        note: str | None,
    ) -> tuple[str, str]:
        """(the facts, what to do about them)."""
        assert base.evaluation is not None
        ev = base.evaluation
        d = diagnose(ev, ctx.task, base.code)
        shown = self._examples(d.patterns, [f.name for f in ev.failures])
        heavy = level is FeedbackIntensity.HEAVY
        lines = failure_lines(
            ev,
            d,
            ctx.task,
            shown=shown,
            heavy=heavy,
            hints=1 if heavy else self.config.hints,
            code=base.code,
        )
        if note:
            lines.append(f"A reviewer's reading: {note}")
        action = level_action(level)
        if self.config.aggressive:
            action = f"{action} {_AGGRESSIVE}"
        action = f"{action}\n{PRECISE_ANSWER}"
        shape = skeleton(ctx.task, base.code) if missing_entry_point(ev) else None
        if shape is not None:
            # Last, where a small model looks: the shape to complete, not a rule to follow.
            action = f"{action}\nComplete this top-level definition (not a method):\n{shape}"
        return "\n".join(lines), action


def _temperature_range(value: object) -> tuple[float, float]:
    if (
        not isinstance(value, tuple)
        or len(value) != 2
        or not all(isinstance(t, int | float) and not isinstance(t, bool) for t in value)
        or not 0.0 <= value[0] <= value[1] <= 2.0
    ):
        raise ConfigurationError(
            "temperatures", value, "must be (low, high) with 0 <= low <= high <= 2"
        )
    return float(value[0]), float(value[1])


def _best(history: Sequence[RefinementRound]) -> RefinementRound:
    """The best evaluated round (the latest of equal scores: it has the newest fixes)."""
    best: RefinementRound | None = None
    for r in history:
        if r.score is not None and (best is None or best.score is None or r.score >= best.score):
            best = r
    if best is None:
        raise ConfigurationError("history", history, "no evaluated round")
    return best


def _repeated(history: Sequence[RefinementRound]) -> bool:
    """Whether the latest round's code is a program an earlier round already produced."""
    *earlier, last = history
    return bool(earlier) and any(same_code(r.code, last.code) for r in earlier)


def pid_feedback(
    kp: float = 0.6,
    ki: float = 0.2,
    kd: float = 0.15,
    *,
    thresholds: tuple[float, float] = (0.3, 0.6),
    aggressive: bool = False,
    gain_reduction: float = 0.5,
    min_gain_scale: float = 0.25,
    max_failures: int = 8,
    per_pattern: int = 3,
    hints: int = 2,
    escalate_on_repeat: bool = True,
    temperatures: tuple[float, float] | None = (0.2, 0.8),
    target: float = 1.0,
    memory: IntensityMemory | None = None,
) -> PIDFeedback:
    """PID-set precise feedback ("PID-enhanced mode"); see :class:`PIDFeedback`."""
    return PIDFeedback(
        kp=kp,
        ki=ki,
        kd=kd,
        thresholds=thresholds,
        aggressive=aggressive,
        gain_reduction=gain_reduction,
        min_gain_scale=min_gain_scale,
        max_failures=max_failures,
        per_pattern=per_pattern,
        hints=hints,
        escalate_on_repeat=escalate_on_repeat,
        temperatures=temperatures,
        target=target,
        memory=memory,
    )
