"""Focused feedback: one small failing case, its line, and what the last attempt broke.

A selectable feedback form (``focused``), not a default: measured against resampling
before it is used in one. Every round edits the best program so far; the feedback is
:func:`~._prompts.focused_lines` (the smallest failing check with expected and actual
value, the failing line, a diff of the latest attempt against the best when it did
worse). When the model hands back a program it already wrote, the next round asks for a
fresh implementation with the same facts and leaves the code out, so it cannot be copied
again (the escalation of PID feedback, without its controller).
"""

from __future__ import annotations

from dataclasses import dataclass

from .._validation import require_temperature
from ._prompts import (
    PRECISE_ANSWER,
    continue_messages,
    focused_lines,
    fresh_messages,
    same_code,
)
from ._results import RefinementRound
from ._strategies import Feedback, StrategyContext, StrategySession
from ._tasks import CodeTask

__all__ = ["FocusedFeedback", "focused_feedback"]

_EDIT = "Fix the code so that this test passes; keep what already works."
_FRESH = "Write a new implementation from scratch that passes this test."


@dataclass(frozen=True, slots=True)
class FocusedFeedback:
    """The focused feedback form as a strategy; ``temperature`` for rounds 2+ (None: the
    generator's), ``repeat_temperature`` after a repeated program."""

    temperature: float | None = None
    repeat_temperature: float | None = 0.6

    def __post_init__(self) -> None:
        for name in ("temperature", "repeat_temperature"):
            value = getattr(self, name)
            if value is not None:
                require_temperature(name, value)

    @property
    def name(self) -> str:
        return "focused"

    def start(self, task: CodeTask) -> StrategySession:
        """A refinement session of this strategy for ``task``."""
        return _FocusedSession(self, task)


@dataclass(slots=True)
class _FocusedSession:
    config: FocusedFeedback
    task: CodeTask

    def evaluates(self, round: int) -> bool:
        return True

    def feedback(self, ctx: StrategyContext) -> Feedback:
        evaluated = [r for r in ctx.history if r.evaluation is not None]
        # The best evaluated round (the latest of equal scores: it has the newest fixes).
        best = max(reversed(evaluated), key=lambda r: r.score or 0.0)
        assert best.evaluation is not None
        latest = evaluated[-1]
        lines = focused_lines(
            best.evaluation, ctx.task, best.code, None if latest is best else latest.code
        )
        repeated = _repeated(ctx.history)
        action = _FRESH if repeated else _EDIT
        text = "\n".join([*lines, action, PRECISE_ANSWER])
        messages = (
            fresh_messages(ctx.task, text)
            if repeated
            else continue_messages(ctx.task, best.code, text)
        )
        temperature = self.config.repeat_temperature if repeated else self.config.temperature
        return Feedback(
            messages=messages, text=text, facts="\n".join(lines), temperature=temperature
        )

    def observe(self, rnd: RefinementRound) -> None:
        pass


def _repeated(history: tuple[RefinementRound, ...]) -> bool:
    *earlier, last = history
    return bool(earlier) and any(same_code(r.code, last.code) for r in earlier)


def focused_feedback(
    temperature: float | None = None, *, repeat_temperature: float | None = 0.6
) -> FocusedFeedback:
    """The focused feedback form (see :class:`FocusedFeedback`)."""
    return FocusedFeedback(temperature, repeat_temperature)
