"""Feedback strategies: what the generator is told between rounds (seed 003).

- :func:`blind_retry`: open loop. Every round gets the original prompt and nothing else.
- :func:`self_refine`: feedback with a poor sensor. The last code, its pass count, "improve it".
- :func:`pid_feedback`: precise feedback. Failing checks with got / expected, a diagnosis,
  preventive hints about related code paths, and an intensity (light / medium / heavy)
  set by a PID controller on the error ``1 − score``; gains are reduced for an aggressive
  prompt and after a regression (seed 003 experiment B1). Light and medium feedback come
  with the last code to edit; heavy feedback asks for a new implementation and leaves the
  old code out, so it cannot anchor the answer.
- :func:`interval`: evaluate only every n-th round (experiment B2); in between, the
  generator keeps working on the last feedback.

A strategy is a frozen configuration; ``strategy.start(task)`` returns a session that
holds the run's state (the PID controller) and is asked for each round's messages.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from .._exceptions import ConfigurationError
from .._validation import require_int_at_least, require_non_negative, require_unit_interval
from ..control import PID, FeedbackIntensity, LyapunovVerdict, schedule_feedback_intensity
from ..models import Message
from ._diagnosis import diagnose
from ._results import RefinementRound
from ._tasks import Task

__all__ = [
    "SYSTEM_PROMPT",
    "BlindRetry",
    "Feedback",
    "Interval",
    "PIDFeedback",
    "SelfRefine",
    "Strategy",
    "StrategyContext",
    "StrategySession",
    "blind_retry",
    "initial_messages",
    "interval",
    "pid_feedback",
    "self_refine",
]

SYSTEM_PROMPT = (
    "You are an expert Python programmer. Write correct, complete, self-contained Python "
    "code. Answer with a single ```python code block."
)
_ANSWER = "Answer with the complete corrected code in a single ```python block."
_LEVEL_ACTION: dict[FeedbackIntensity, str] = {
    FeedbackIntensity.LIGHT: (
        "The overall design is right; fix only the specific bugs. Keep the structure and "
        "change only the faulty parts, and check related code for the same mistake."
    ),
    FeedbackIntensity.MEDIUM: (
        "The code has structural problems. Restructure the faulty parts, but keep the "
        "logic that already works."
    ),
    FeedbackIntensity.HEAVY: (
        "The earlier attempt (not shown) had many problems. Write a new implementation; "
        "consider a different data structure or algorithm."
    ),
}
_AGGRESSIVE = "Rewrite all related code thoroughly."


def initial_messages(task: Task) -> tuple[Message, ...]:
    """Round 1 (and every round of blind retry): the system prompt and the task."""
    return (
        Message(role="system", content=SYSTEM_PROMPT),
        Message(role="user", content=task.prompt),
    )


def _fresh(task: Task, feedback: str) -> tuple[Message, ...]:
    # Heavy intensity means "change the approach": the old code is left out so that it
    # does not anchor the next answer; the failures it caused are still described.
    return (
        Message(role="system", content=SYSTEM_PROMPT),
        Message(role="user", content=f"{task.prompt}\n\n{feedback}"),
    )


def _continue(task: Task, code: str, feedback: str) -> tuple[Message, ...]:
    return (
        *initial_messages(task),
        Message(role="assistant", content=f"```python\n{code.rstrip()}\n```"),
        Message(role="user", content=feedback),
    )


@dataclass(frozen=True, slots=True)
class Feedback:
    """What a session asks for the next round: messages, and the control values behind them."""

    messages: tuple[Message, ...]
    text: str | None = None
    control: float | None = None
    level: FeedbackIntensity | None = None
    gains: tuple[float, float, float] | None = None


@dataclass(frozen=True, slots=True)
class StrategyContext:
    """What a session sees before generating round ``round`` (≥ 2).

    ``history`` holds every earlier round; ``verdict`` is the Lyapunov monitor's reading
    of the latest evaluated round; ``note`` is a model's reading of the failures, when the
    refiner has a diagnoser.
    """

    task: Task
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


class Strategy(Protocol):
    """A feedback strategy: a name, and a session per run."""

    @property
    def name(self) -> str: ...

    def start(self, task: Task) -> StrategySession: ...


def _score_line(r: RefinementRound) -> str:
    ev = r.evaluation
    if ev is None:
        return "Your code was not tested this round."
    return f"Your code passes {ev.passed} of {ev.total} tests."


# --- blind retry -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BlindRetry:
    """Open loop: the original prompt every round; nothing of earlier rounds is passed on."""

    @property
    def name(self) -> str:
        return "blind_retry"

    def start(self, task: Task) -> StrategySession:
        return _BlindSession(task)


@dataclass(slots=True)
class _BlindSession:
    task: Task

    def evaluates(self, round: int) -> bool:
        return True

    def feedback(self, ctx: StrategyContext) -> Feedback:
        return Feedback(messages=initial_messages(ctx.task))


def blind_retry() -> BlindRetry:
    """Open-loop retry (seed 003's baseline)."""
    return BlindRetry()


# --- self-refine -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SelfRefine:
    """The last code, its pass count and "improve it"; no failing tests, no diagnosis."""

    @property
    def name(self) -> str:
        return "self_refine"

    def start(self, task: Task) -> StrategySession:
        return _SelfRefineSession(task)


@dataclass(slots=True)
class _SelfRefineSession:
    task: Task

    def evaluates(self, round: int) -> bool:
        return True

    def feedback(self, ctx: StrategyContext) -> Feedback:
        text = f"{_score_line(ctx.last)} Review it and improve it. {_ANSWER}"
        return Feedback(messages=_continue(ctx.task, ctx.last.code, text), text=text)


def self_refine() -> SelfRefine:
    """Self-refine: feedback without specifics."""
    return SelfRefine()


# --- PID feedback ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PIDFeedback:
    """Precise feedback whose intensity a PID controller sets from the error ``1 − score``.

    Args:
        kp, ki, kd: the seed's gains (0.6, 0.2, 0.15); one round is one sample (``dt=1``).
            The controller is ``closedloop.control.PID`` with derivative on the error, so
            the first feedback has no D term (there is no earlier error): seed 003's worked
            example (score 0.7) gives u = 0.24 here where the seed, taking Δe = e on the
            first round, wrote 0.285. Both are "light".
        thresholds: u below the first is light, below the second medium, else heavy.
        aggressive: ask for thorough rewrites (seed 003 B1's "aggressive mode"). The gains
            are then multiplied by ``gain_reduction`` from the start: a stronger push per
            unit of error needs a gentler controller.
        gain_reduction: factor applied to the gains in aggressive mode, and again after
            every round whose ``V`` rose (a regression); 1.0 disables both.
        min_gain_scale: the gains are never scaled below this share of the original.
        max_failures: at most this many failing checks are listed (the rest are counted).
        per_pattern: at most this many examples of one failure pattern are listed.
        target: the score the controller drives toward.
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
    target: float = 1.0

    def __post_init__(self) -> None:
        for name in ("kp", "ki", "kd"):
            require_non_negative(name, getattr(self, name))
        require_unit_interval("gain_reduction", self.gain_reduction)
        require_unit_interval("min_gain_scale", self.min_gain_scale)
        require_int_at_least("max_failures", self.max_failures, 1)
        require_int_at_least("per_pattern", self.per_pattern, 1)
        require_unit_interval("target", self.target)
        schedule_feedback_intensity(self.thresholds)  # validates the thresholds

    @property
    def name(self) -> str:
        return "pid_aggressive" if self.aggressive else "pid"

    def start(self, task: Task) -> StrategySession:
        return _PIDSession(self, task)


@dataclass(slots=True)
class _PIDSession:
    config: PIDFeedback
    task: Task
    scale: float = 1.0
    measured: int = 0
    u: float = 0.0
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
        if last.index > self.measured:
            if ctx.verdict is not None and ctx.verdict.increased and c.gain_reduction < 1.0:
                # B1: the last push made things worse; push more gently from now on.
                self.scale = max(c.min_gain_scale, self.scale * c.gain_reduction)
                self.pid.tunings = self._gains()
            self.u = self.pid(last.score, dt=1.0)
            self.measured = last.index
        level = schedule_feedback_intensity(c.thresholds)(self.u)
        text = self._text(ctx, last, level, ctx.note)
        heavy = level is FeedbackIntensity.HEAVY
        return Feedback(
            messages=_fresh(ctx.task, text) if heavy else _continue(ctx.task, ctx.last.code, text),
            text=text,
            control=self.u,
            level=level,
            gains=self._gains(),
        )

    def _examples(self, patterns: Mapping[str, tuple[str, ...]], names: list[str]) -> set[str]:
        """A few failing checks per pattern: a small model reads three examples of one bug
        better than ten."""
        c = self.config
        shown: set[str] = set()
        for group in patterns.values():
            shown.update(group[: c.per_pattern])
        return set([n for n in names if n in shown][: c.max_failures])

    def _text(
        self,
        ctx: StrategyContext,
        last: RefinementRound,
        level: FeedbackIntensity,
        note: str | None,
    ) -> str:
        assert last.evaluation is not None
        ev = last.evaluation
        d = diagnose(ev, ctx.task, last.code)
        lines = [_score_line(last), f"Control signal u = {self.u:.3f} ({level} intensity)."]
        failures = ev.failures
        if failures and ev.status.value in ("passed", "failed"):
            lines.append("Failed tests:")
            shown = self._examples(d.patterns, [f.name for f in failures])
            lines += [f"- {f.describe()}" for f in failures if f.name in shown]
            if len(failures) > len(shown):
                lines.append(f"- ... and {len(failures) - len(shown)} more like these")
        diagnosis = d.lines()
        if diagnosis:
            lines.append("Diagnosis:")
            lines += [f"- {line}" for line in diagnosis]
        if note:
            lines.append(f"A reviewer's reading: {note}")
        if d.hints:
            lines.append("Also check (related code paths):")
            lines += [f"- {hint}" for hint in d.hints]
        action = _LEVEL_ACTION[level]
        if self.config.aggressive:
            action = f"{action} {_AGGRESSIVE}"
        lines.append(f"Action: {action}")
        lines.append(_ANSWER)
        return "\n".join(lines)


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
    target: float = 1.0,
) -> PIDFeedback:
    """PID-set precise feedback (seed 003's "PID-enhanced mode"); see :class:`PIDFeedback`."""
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
        target=target,
    )


# --- interval feedback -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Interval:
    """Evaluate every ``n``-th round only (rounds 1, 1+n, 1+2n, ... and the last).

    In a round after an unevaluated one, the generator gets its latest code and the last
    feedback again, to keep working on it: seed 003 B2 saw the same convergence with
    half the evaluator calls.
    """

    n: int
    inner: Strategy

    def __post_init__(self) -> None:
        require_int_at_least("n", self.n, 1)

    @property
    def name(self) -> str:
        return f"{self.inner.name}+interval{self.n}"

    def start(self, task: Task) -> StrategySession:
        return _IntervalSession(self.n, self.inner.start(task))


@dataclass(slots=True)
class _IntervalSession:
    n: int
    inner: StrategySession
    last: Feedback | None = None

    def evaluates(self, round: int) -> bool:
        return (round - 1) % self.n == 0

    def feedback(self, ctx: StrategyContext) -> Feedback:
        if ctx.last.evaluated or self.last is None:
            self.last = self.inner.feedback(ctx)
            return self.last
        earlier = self.last.text or "Improve the code."
        text = (
            "Your latest version was not tested this round. The last test run said:\n"
            f"{earlier}\nMake sure your latest code addresses all of it."
        )
        return Feedback(
            messages=_continue(ctx.task, ctx.last.code, text),
            text=text,
            control=self.last.control,
            level=self.last.level,
            gains=self.last.gains,
        )


def interval(n: int, inner: Strategy | None = None) -> Interval:
    """Interval feedback: ``inner`` (default :func:`pid_feedback`) evaluated every n-th round."""
    return Interval(n, pid_feedback() if inner is None else inner)
