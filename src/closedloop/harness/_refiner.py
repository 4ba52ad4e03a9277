"""The refinement loop: generate, evaluate, feed back, until a stop policy says enough.

A generator / evaluator loop is a discrete-time feedback system: each round
is one sample; the evaluator's pass rate is the measurement; the strategy is the
controller; the stop policy watches ``V = ½(target − score)²``. The refiner records
every round and returns the best evaluated round, so what it hands back is never worse
than any round it measured, whatever the last round did.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from .._exceptions import ConfigurationError, ModelError
from .._validation import require_int_at_least, require_unit_interval
from ..control import LyapunovMonitor, LyapunovVerdict
from ..models import Message
from ._evaluation import CheckResult, Evaluation, EvaluationStatus, not_run
from ._generator import Generator
from ._prompts import initial_messages, same_code
from ._results import RefinementResult, RefinementRound
from ._sandbox import Sandbox
from ._stop import (
    RefineState,
    RefineStop,
    StopDecision,
    StopReason,
    stop_on_fixed_point,
    stop_on_lyapunov,
    stop_on_trajectory,
)
from ._stop import stop_when_target_met as _target_met
from ._strategies import Feedback, Strategy, StrategyContext, pid_feedback
from ._tasks import CodeTask

__all__ = ["Diagnoser", "Evaluator", "Refiner", "SandboxEvaluator"]


class Evaluator(Protocol):
    """Deterministic tests of code for a task; never a model's opinion."""

    async def __call__(self, task: CodeTask, code: str) -> Evaluation: ...


class Diagnoser(Protocol):
    """An optional reading of the failures (a model's), added beside the tests' facts."""

    async def __call__(self, task: CodeTask, code: str, failures: Sequence[CheckResult]) -> str: ...


class SandboxEvaluator:
    """Runs a task's checks on the code in a :class:`Sandbox`; counts its calls."""

    def __init__(self, sandbox: Sandbox | None = None) -> None:
        self.sandbox = Sandbox() if sandbox is None else sandbox
        self.calls = 0

    def __repr__(self) -> str:
        return f"SandboxEvaluator({self.sandbox!r})"

    async def __call__(self, task: CodeTask, code: str) -> Evaluation:
        self.calls += 1
        return await self.sandbox.run(task, code)


class Refiner:
    """Refines code for a task round by round.

    Args:
        generator: writes code from messages (``ModelGenerator(model)``).
        evaluator: scores code with the task's checks (default: a fresh sandbox).
        strategy: what the generator is told between rounds (default: PID feedback).
        stop: when to stop early (default: target met, two consecutive rises of ``V``,
            a diverging / oscillating / stalling trajectory after three evaluated rounds,
            or a fixed point: the same program back under the same feedback).
        max_rounds: the hard limit on rounds, including the first.
        target: the score that counts as done.
        seed: round ``k`` is generated with seed ``seed + k − 1`` (the same for every
            strategy, so round 1 is the same call everywhere); None passes no seed.
        diagnoser: optional model reading of the failures, offered to the strategy.
        clock: for the time each round took; injected so tests need no real time.
    """

    def __init__(
        self,
        generator: Generator,
        evaluator: Evaluator | None = None,
        strategy: Strategy | None = None,
        *,
        stop: RefineStop | None = None,
        max_rounds: int = 4,
        target: float = 1.0,
        seed: int | None = 0,
        diagnoser: Diagnoser | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        if not callable(generator):
            raise ConfigurationError("generator", generator, "must be callable")
        self.generator = generator
        self.evaluator: Evaluator = SandboxEvaluator() if evaluator is None else evaluator
        self.strategy: Strategy = pid_feedback() if strategy is None else strategy
        self.target = require_unit_interval("target", target)
        self.stop: RefineStop = (
            _target_met(self.target)
            | stop_on_lyapunov()
            | stop_on_trajectory()
            | stop_on_fixed_point()
            if stop is None
            else stop
        )
        self.max_rounds = require_int_at_least("max_rounds", max_rounds, 1)
        if seed is not None:
            require_int_at_least("seed", seed, 0)
        self.seed = seed
        self.diagnoser = diagnoser
        self._clock = clock

    def __repr__(self) -> str:
        return (
            f"Refiner(strategy={self.strategy.name!r}, max_rounds={self.max_rounds}, "
            f"target={self.target})"
        )

    def run_sync(self, task: CodeTask, *, first: RefinementRound | None = None) -> RefinementResult:
        """Blocking form of :meth:`run`."""
        return asyncio.run(self.run(task, first=first))

    async def first_round(self, task: CodeTask) -> RefinementRound:
        """Round 1 alone (the task prompt, evaluated), to share between strategies."""
        return await self._round(task, 1, initial_messages(task), None, evaluate=True)

    async def run(
        self, task: CodeTask, *, first: RefinementRound | None = None
    ) -> RefinementResult:
        """Refine until the stop policy or ``max_rounds`` ends the run.

        ``first`` reuses a round 1 made earlier (by :meth:`first_round`, maybe for another
        strategy): it must be round 1 and evaluated.
        """
        if first is not None and (first.index != 1 or first.score is None):
            raise ConfigurationError("first", first.index, "must be an evaluated round 1")
        session = self.strategy.start(task)
        monitor = LyapunovMonitor(target=self.target)
        rounds: list[RefinementRound] = []
        verdict: LyapunovVerdict | None = None
        note: str | None = None
        decision: StopDecision | None = None
        feedback: Feedback | None = None
        for k in range(1, self.max_rounds + 1):
            if k == 1:
                rnd = first if first is not None else await self.first_round(task)
            else:
                assert feedback is not None
                evaluate = session.evaluates(k) or k == self.max_rounds
                rnd = await self._round(task, k, feedback.messages, feedback, evaluate=evaluate)
            if rnd.score is not None:
                verdict = monitor.observe(min(rnd.score, self.target))
                rnd = rnd.model_copy(update={"V": verdict.V, "dV": verdict.dV})
                note = await self._diagnose(task, rnd)
            rounds.append(rnd)
            session.observe(rnd)
            # The next round's feedback is settled before the stop policy reads the state,
            # so the policy can tell a loop that stands still from one that will move.
            last_feedback = feedback
            feedback = None
            if k < self.max_rounds:
                ctx = StrategyContext(task, k + 1, tuple(rounds), verdict, note)
                feedback = session.feedback(ctx)
            state = RefineState(
                k,
                tuple(r.score for r in rounds),
                self.target,
                fixed_point=feedback is not None and _stands_still(rounds, last_feedback, feedback),
            )
            decision = self.stop(state)
            if decision is not None:
                break
        if decision is None:
            decision = StopDecision(StopReason.MAX_ROUNDS, f"all {self.max_rounds} rounds run")
        return self._result(task, rounds, decision, verdict, getattr(session, "choice", None))

    async def _diagnose(self, task: CodeTask, rnd: RefinementRound) -> str | None:
        if self.diagnoser is None or rnd.evaluation is None or not rnd.evaluation.failures:
            return None
        try:
            return await self.diagnoser(task, rnd.code, rnd.evaluation.failures)
        except ModelError:
            return None  # the reading is optional; the tests' facts still go out

    async def _round(
        self,
        task: CodeTask,
        k: int,
        messages: Sequence[Message],
        feedback: Feedback | None,
        *,
        evaluate: bool,
    ) -> RefinementRound:
        seed = None if self.seed is None else self.seed + k - 1
        started = self._clock()
        error: str | None = None
        try:
            gen = await self.generator(
                messages,
                seed=seed,
                entry_point=task.entry_point,
                temperature=None if feedback is None else feedback.temperature,
            )
        except ModelError as exc:
            # A failed model call is a failed round, not a failed run.
            error = f"{type(exc).__name__}: {exc}"
            code, text, p_tok, c_tok, cached, gen_s = "", "", 0, 0, False, 0.0
        else:
            code, text, cached, gen_s = gen.code, gen.text, gen.cached, gen.latency_s
            p_tok, c_tok = gen.prompt_tokens, gen.completion_tokens
        generated = self._clock()
        evaluation: Evaluation | None = None
        if evaluate:
            if error is not None:
                evaluation = not_run(
                    task, EvaluationStatus.NO_CODE, f"the model call failed: {error}"
                )
            else:
                evaluation = await self.evaluator(task, code)
        return RefinementRound(
            index=k,
            code=code,
            text=text,
            evaluation=evaluation,
            score=None if evaluation is None else evaluation.pass_rate,
            feedback=None if feedback is None else feedback.text,
            control=None if feedback is None else feedback.control,
            level=None if feedback is None or feedback.level is None else str(feedback.level),
            gains=None if feedback is None else feedback.gains,
            temperature=None if feedback is None else feedback.temperature,
            seed=seed,
            prompt_tokens=p_tok,
            completion_tokens=c_tok,
            generation_s=gen_s if cached else max(0.0, generated - started),
            evaluation_s=max(0.0, self._clock() - generated) if evaluate else 0.0,
            cached=cached,
            error=error,
        )

    def _result(
        self,
        task: CodeTask,
        rounds: list[RefinementRound],
        decision: StopDecision,
        verdict: LyapunovVerdict | None,
        choice: object,
    ) -> RefinementResult:
        evaluated = [r for r in rounds if r.score is not None]
        # max() keeps the first of equal scores: the earliest best round.
        best = max(evaluated, key=lambda r: r.score if r.score is not None else -1.0)
        assert best.score is not None
        return RefinementResult(
            task=task.name,
            strategy=self.strategy.name,
            target=self.target,
            rounds=tuple(rounds),
            best_round=best.index,
            best_code=best.code,
            best_score=best.score,
            stop_reason=str(decision.reason),
            stop_detail=decision.detail,
            trajectory=None
            if verdict is None or verdict.trajectory is None
            else str(verdict.trajectory),
            choice=choice if isinstance(choice, str) else None,
        )


def _stands_still(
    rounds: Sequence[RefinementRound], last: Feedback | None, upcoming: Feedback
) -> bool:
    """The latest program repeats an earlier one, and the feedback that produced it (None
    for round 1's prompt) is what the next round would get again."""
    *earlier, latest = rounds
    if not any(same_code(r.code, latest.code) for r in earlier):
        return False
    if last is None:
        return False  # round 1 had the bare prompt; the next round has feedback
    return (last.text, last.temperature) == (upcoming.text, upcoming.temperature)
