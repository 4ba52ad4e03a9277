"""Refinement of a batch under one total budget: an allocation policy decides where each
generation goes.

A per-problem round count compares strategies at equal rounds, not at equal cost; and at
equal sample budget the gains of self-repair are "often modest, sometimes absent"
(Olausson et al., ICLR 2024). What a controller can do with a fixed total is *allocate*
it. :func:`run_budgeted` gives every problem its round 1 (the task prompt, shared by
every policy), then asks a :class:`BatchPolicy` which problem gets the next generation,
with which messages and temperature, until the :class:`BatchBudget` is spent or the policy has
nothing left worth trying. Every generation is recorded (:class:`AllocationRecord`: which
problem, why, what it scored, the cumulative cost), so pass rate against tokens is read
straight off the record (``_curves``).

Each problem returns its best evaluated round (the earliest of equal scores), so a run
never hands back a program worse than one it already had.

Seeds: round 1 uses ``seed``; the j-th resample of a problem (the task prompt again) at
one temperature uses ``seed + j``, and a round with feedback uses ``seed + round − 1``, as
:class:`Refiner` does. Blind retry spread over rounds thus makes exactly the calls of a
per-round run, and a cache of such a run serves them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from pydantic import BaseModel, ConfigDict

from .._exceptions import ConfigurationError, ModelError
from .._validation import require_int_at_least, require_unit_interval
from ..control import LyapunovMonitor, LyapunovVerdict
from ._evaluation import Evaluation, EvaluationStatus, not_run
from ._generator import CACHE_MISS, Generator
from ._prompts import initial_messages
from ._refiner import Evaluator, SandboxEvaluator
from ._results import RefinementResult, RefinementRound
from ._stop import StopReason
from ._strategies import Feedback, StrategyContext
from ._tasks import CodeTask

__all__ = [
    "AllocationRecord",
    "BatchBudget",
    "BatchPolicy",
    "BatchSession",
    "BudgetRun",
    "Choice",
    "MemoEvaluator",
    "ProblemView",
    "run_budgeted",
]

_FROZEN = ConfigDict(frozen=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchBudget:
    """The total for a batch: generations, tokens (prompt + completion), or both.

    A generation starts only while the totals are not reached: a generation budget is met
    exactly; a token budget can be passed by the size of the last generation (its cost is
    known only once it is made), which curves read at equal tokens do not reward.
    """

    generations: int | None = None
    tokens: int | None = None

    def __post_init__(self) -> None:
        if self.generations is None and self.tokens is None:
            raise ConfigurationError("budget", None, "give generations, tokens or both")
        if self.generations is not None:
            require_int_at_least("generations", self.generations, 1)
        if self.tokens is not None:
            require_int_at_least("tokens", self.tokens, 1)

    def spent(self, generations: int, tokens: int) -> bool:
        """Whether no further generation may start."""
        return (self.generations is not None and generations >= self.generations) or (
            self.tokens is not None and tokens >= self.tokens
        )

    def describe(self) -> str:
        """The total in words: ``492 generations``."""
        parts = [] if self.generations is None else [f"{self.generations} generations"]
        parts += [] if self.tokens is None else [f"{self.tokens} tokens"]
        return " or ".join(parts)


@dataclass(frozen=True, slots=True)
class ProblemView:
    """What a policy sees of one problem: its rounds so far and the error they measured.

    ``V`` is ``½·(target − best)²`` of the best round so far (the Lyapunov value of what
    the run would return) and ``dV`` its change over the latest round (≤ 0; None before a
    second round). ``stalled`` counts the rounds since the best last improved.
    """

    index: int
    task: CodeTask
    history: tuple[RefinementRound, ...]
    actions: tuple[str, ...]
    target: float
    tokens: int
    verdict: LyapunovVerdict | None = None

    @property
    def scores(self) -> tuple[float, ...]:
        """Each round's pass rate (a failed call scores 0)."""
        return tuple(0.0 if r.score is None else r.score for r in self.history)

    @property
    def rounds(self) -> int:
        """How many generations this problem has had."""
        return len(self.history)

    @property
    def best(self) -> float:
        """The pass rate of the program the run would return now."""
        return max(self.scores, default=0.0)

    @property
    def solved(self) -> bool:
        """Whether the best round met the target."""
        return self.best >= self.target - 1e-12

    @property
    def V(self) -> float:
        """``½·(target − best)²``."""
        return 0.5 * max(0.0, self.target - self.best) ** 2

    @property
    def dV(self) -> float | None:
        """The change of ``V`` over the latest round (None before a second round)."""
        if self.rounds < 2:
            return None
        before = max(self.scores[:-1])
        return self.V - 0.5 * max(0.0, self.target - before) ** 2

    @property
    def stalled(self) -> int:
        """Rounds since the best last improved."""
        scores = self.scores
        best_at = scores.index(max(scores)) if scores else 0
        return len(scores) - 1 - best_at

    def context(self) -> StrategyContext:
        """The strategy context for this problem's next round."""
        return StrategyContext(self.task, self.rounds + 1, self.history, self.verdict)


@dataclass(frozen=True, slots=True)
class Choice:
    """A policy's decision: problem ``index`` gets ``feedback`` next, labelled ``action``,
    for ``reason`` (recorded as it is)."""

    index: int
    feedback: Feedback
    action: str
    reason: str


class BatchSession(Protocol):
    """The per-run side of a policy."""

    def choose(self, problems: Sequence[ProblemView]) -> Choice | None:
        """The next generation, or None to leave the rest of the budget unspent."""
        ...

    def observe(self, problem: ProblemView, choice: Choice) -> None:
        """``problem`` after the round ``choice`` asked for (its score is in its history)."""
        ...


class BatchPolicy(Protocol):
    """Where a batch's budget goes: a name, and a session per run."""

    @property
    def name(self) -> str: ...

    def start(self, tasks: Sequence[CodeTask], budget: BatchBudget) -> BatchSession:
        """A session over ``tasks`` with ``budget`` to spend."""
        ...


class AllocationRecord(BaseModel):
    """One generation of a budgeted run: where it went, why, and what it did."""

    model_config = _FROZEN

    step: int
    problem: str
    round: int
    action: str
    reason: str
    temperature: float | None
    seed: int | None
    score: float
    best: float
    V: float
    dV: float | None
    prompt_tokens: int
    completion_tokens: int
    generations: int
    """Cumulative generations of the run after this one."""
    tokens: int
    """Cumulative tokens (prompt + completion) after this one."""
    cached: bool = False
    miss: bool = False
    """Not in the generation cache in a cache-only replay: the round failed unmade, its
    tokens are estimated from the problem's round 1."""


class BudgetRun(BaseModel):
    """A budgeted run of one policy: every generation and what each problem returned."""

    model_config = _FROZEN

    policy: str
    budget_generations: int | None
    budget_tokens: int | None
    generations: int
    tokens: int
    misses: int
    allocations: tuple[AllocationRecord, ...]
    results: tuple[RefinementResult, ...]

    @property
    def solved(self) -> int:
        """Problems whose returned program meets the target."""
        return sum(1 for r in self.results if r.best_score >= r.target - 1e-12)

    @property
    def returned_regressed(self) -> int:
        """Problems whose returned program scores below a round they had (a bug: want 0)."""
        return sum(1 for r in self.results if r.returned_regressed)


class MemoEvaluator:
    """Tests each (task, program) once: checks are deterministic, and resamples of a small
    model often repeat a program. Shared between policies, it tests a batch's programs
    once for all of them."""

    def __init__(self, evaluator: Evaluator | None = None) -> None:
        self.evaluator: Evaluator = SandboxEvaluator() if evaluator is None else evaluator
        self._seen: dict[tuple[str, str], Evaluation] = {}
        self.calls = 0

    async def __call__(self, task: CodeTask, code: str) -> Evaluation:
        key = (task.name, code)
        if key not in self._seen:
            self.calls += 1
            self._seen[key] = await self.evaluator(task, code)
        return self._seen[key]


@dataclass(slots=True)
class _Problem:
    index: int
    task: CodeTask
    target: float
    rounds: list[RefinementRound] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    resamples: dict[float | None, int] = field(default_factory=dict)
    monitor: LyapunovMonitor | None = None
    verdict: LyapunovVerdict | None = None
    tokens: int = 0

    def view(self) -> ProblemView:
        return ProblemView(
            self.index,
            self.task,
            tuple(self.rounds),
            tuple(self.actions),
            self.target,
            self.tokens,
            self.verdict,
        )


@dataclass(slots=True)
class _Run:
    generator: Generator
    evaluator: Evaluator
    seed: int | None
    clock: Callable[[], float]
    generations: int = 0
    tokens: int = 0
    records: list[AllocationRecord] = field(default_factory=list)

    def seed_for(self, problem: _Problem, feedback: Feedback | None) -> int | None:
        if self.seed is None:
            return None
        if feedback is None:
            return self.seed
        if feedback.messages == initial_messages(problem.task):
            j = problem.resamples.get(feedback.temperature, 0) + 1
            problem.resamples[feedback.temperature] = j
            return self.seed + j
        return self.seed + len(problem.rounds)

    async def step(
        self, problem: _Problem, feedback: Feedback | None, action: str, reason: str
    ) -> None:
        """Generate, test and record one round of ``problem``."""
        rnd, miss = await self._round(problem, feedback)
        if problem.monitor is None:
            problem.monitor = LyapunovMonitor(target=problem.target)
        score = rnd.score or 0.0
        problem.verdict = problem.monitor.observe(min(score, problem.target))
        rnd = rnd.model_copy(update={"V": problem.verdict.V, "dV": problem.verdict.dV})
        problem.rounds.append(rnd)
        problem.actions.append(action)
        cost = rnd.prompt_tokens + rnd.completion_tokens
        problem.tokens += cost
        self.generations += 1
        self.tokens += cost
        view = problem.view()
        self.records.append(
            AllocationRecord(
                step=self.generations,
                problem=problem.task.name,
                round=rnd.index,
                action=action,
                reason=reason,
                temperature=rnd.temperature,
                seed=rnd.seed,
                score=score,
                best=view.best,
                V=view.V,
                dV=view.dV,
                prompt_tokens=rnd.prompt_tokens,
                completion_tokens=rnd.completion_tokens,
                generations=self.generations,
                tokens=self.tokens,
                cached=rnd.cached,
                miss=miss,
            )
        )

    async def _round(
        self, problem: _Problem, feedback: Feedback | None
    ) -> tuple[RefinementRound, bool]:
        """(the round, whether it was a cache-only replay's miss)."""
        seed = self.seed_for(problem, feedback)
        messages = initial_messages(problem.task) if feedback is None else feedback.messages
        temperature = None if feedback is None else feedback.temperature
        started = self.clock()
        error: str | None = None
        miss = False
        try:
            gen = await self.generator(
                messages, seed=seed, entry_point=problem.task.entry_point, temperature=temperature
            )
        except ModelError as exc:
            # A failed call is a failed round that still counts against the budget.
            error = f"{type(exc).__name__}: {exc}"
            miss = CACHE_MISS in str(exc)
            code, text, cached, gen_s = "", "", False, 0.0
            p_tok, c_tok = _estimate_tokens(problem, messages) if miss else (0, 0)
        else:
            code, text, cached = gen.code, gen.text, gen.cached
            p_tok, c_tok, gen_s = gen.prompt_tokens, gen.completion_tokens, gen.latency_s
        generated = self.clock()
        if error is None:
            evaluation = await self.evaluator(problem.task, code)
        else:
            evaluation = not_run(problem.task, EvaluationStatus.NO_CODE, error)
        rnd = RefinementRound(
            index=len(problem.rounds) + 1,
            code=code,
            text=text,
            evaluation=evaluation,
            score=evaluation.pass_rate,
            feedback=None if feedback is None else feedback.text,
            control=None if feedback is None else feedback.control,
            level=None if feedback is None or feedback.level is None else str(feedback.level),
            temperature=temperature,
            seed=seed,
            prompt_tokens=p_tok,
            completion_tokens=c_tok,
            generation_s=gen_s if cached else max(0.0, generated - started),
            evaluation_s=max(0.0, self.clock() - generated),
            cached=cached,
            error=error,
        )
        return rnd, miss


def _estimate_tokens(problem: _Problem, messages: Sequence[object]) -> tuple[int, int]:
    """A missed generation's cost, from the problem's round 1: the same prompt costs the
    same; a longer one in proportion to its characters; the answer as long as round 1's."""
    if not problem.rounds:
        return 0, 0
    first = problem.rounds[0]
    base = sum(len(m.content) for m in initial_messages(problem.task))
    chars = sum(len(getattr(m, "content", "")) for m in messages)
    prompt = round(first.prompt_tokens * chars / base) if base else first.prompt_tokens
    return prompt, first.completion_tokens


async def run_budgeted(
    tasks: Sequence[CodeTask],
    generator: Generator,
    policy: BatchPolicy,
    budget: BatchBudget,
    *,
    evaluator: Evaluator | None = None,
    seed: int | None = 0,
    target: float = 1.0,
    clock: Callable[[], float] = time.perf_counter,
) -> BudgetRun:
    """Spend ``budget`` on ``tasks`` as ``policy`` decides; round 1 of every task first.

    A generation budget must cover round 1 of every task. A model error (or a cache miss
    in a cache-only replay) is a failed round that still counts against the budget.
    """
    if not tasks:
        raise ConfigurationError("tasks", tasks, "give at least one task")
    require_unit_interval("target", target)
    if budget.generations is not None and budget.generations < len(tasks):
        raise ConfigurationError(
            "budget", budget.generations, f"must cover round 1 of all {len(tasks)} tasks"
        )
    run = _Run(generator, SandboxEvaluator() if evaluator is None else evaluator, seed, clock)
    problems = [_Problem(i, t, target) for i, t in enumerate(tasks)]
    for problem in problems:
        if budget.spent(run.generations, run.tokens):
            break
        await run.step(problem, None, "prompt", "round 1: the task prompt (shared)")
    session = policy.start(tasks, budget)
    while not budget.spent(run.generations, run.tokens):
        choice = session.choose([p.view() for p in problems])
        if choice is None:
            break
        problem = problems[choice.index]
        await run.step(problem, choice.feedback, choice.action, choice.reason)
        session.observe(problem.view(), choice)
    return BudgetRun(
        policy=policy.name,
        budget_generations=budget.generations,
        budget_tokens=budget.tokens,
        generations=run.generations,
        tokens=run.tokens,
        misses=sum(1 for r in run.records if r.miss),
        allocations=tuple(run.records),
        results=tuple(_result(p, policy.name) for p in problems),
    )


def _result(problem: _Problem, name: str) -> RefinementResult:
    rounds = problem.rounds
    if not rounds:
        return RefinementResult(
            task=problem.task.name,
            strategy=name,
            target=problem.target,
            rounds=(),
            best_round=1,
            best_code="",
            best_score=0.0,
            stop_reason=str(StopReason.EXTERNAL),
            stop_detail="budget: spent before this task's round 1",
        )
    best = max(rounds, key=lambda r: r.score if r.score is not None else -1.0)
    solved = best.score is not None and best.score >= problem.target - 1e-12
    return RefinementResult(
        task=problem.task.name,
        strategy=name,
        target=problem.target,
        rounds=tuple(rounds),
        best_round=best.index,
        best_code=best.code,
        best_score=best.score or 0.0,
        stop_reason=str(StopReason.TARGET_MET if solved else StopReason.EXTERNAL),
        stop_detail=f"budget: {len(rounds)} generation(s) allocated",
    )
