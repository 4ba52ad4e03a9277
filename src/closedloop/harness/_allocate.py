"""Allocation policies for a budgeted batch (:func:`run_budgeted`).

Baselines at the same total:

- :func:`spread_evenly`: any per-problem strategy (blind retry, self-refine, PID...) with
  an equal share per problem; a solved problem stops, and its share goes unspent.
- :func:`resample_until_pass`: the task prompt again, to every unsolved problem in turn,
  until the tests pass or the budget is spent: the strongest simple baseline at equal
  sample budget (Olausson et al., ICLR 2024; Chen et al., ICLR 2024).

And the controller, :func:`error_driven`: each problem's measured error decides whether it
gets another round, and the batch's measured outcomes decide with which action.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from .._exceptions import ConfigurationError
from .._validation import require_int_at_least, require_temperature
from ._budget import BatchBudget, Choice, ProblemView
from ._own_temperature import OwnTemperature
from ._prompts import initial_messages
from ._strategies import Feedback, Strategy, StrategySession
from ._tasks import CodeTask

__all__ = [
    "ErrorDriven",
    "ResampleUntilPass",
    "SpreadEvenly",
    "error_driven",
    "resample_until_pass",
    "spread_evenly",
]


def _resample(task: CodeTask, temperature: float | None) -> Feedback:
    return Feedback(messages=initial_messages(task), temperature=temperature)


@dataclass(slots=True)
class _Sessions:
    """One session of ``strategy`` per problem, started on the problem's first use and
    caught up on the rounds it had before."""

    strategy: Strategy
    open: dict[int, StrategySession] = field(default_factory=dict)
    seen: dict[int, int] = field(default_factory=dict)

    def feedback(self, view: ProblemView) -> Feedback:
        self._sync(view)
        return self.open[view.index].feedback(view.context())

    def _sync(self, view: ProblemView) -> None:
        if view.index not in self.open:
            self.open[view.index] = self.strategy.start(view.task)
            self.seen[view.index] = 0
        for rnd in view.history[self.seen[view.index] :]:
            self.open[view.index].observe(rnd)
        self.seen[view.index] = view.rounds


# --- an equal share per problem ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SpreadEvenly:
    """``strategy`` on every problem with an equal share of the budget (generations: the
    total divided by the problems, the first ones getting the remainder; tokens: the total
    divided evenly). Rounds go out in passes (every problem's round 2, then round 3)."""

    strategy: Strategy

    @property
    def name(self) -> str:
        return f"even:{self.strategy.name}"

    def start(self, tasks: Sequence[CodeTask], budget: BatchBudget) -> _EvenSession:
        """A session over ``tasks`` with each problem's share of ``budget``."""
        n = len(tasks)
        quotas = None
        if budget.generations is not None:
            base, extra = divmod(budget.generations, n)
            quotas = tuple(base + (1 if i < extra else 0) for i in range(n))
        share = None if budget.tokens is None else budget.tokens / n
        return _EvenSession(_Sessions(self.strategy), quotas, share)


@dataclass(slots=True)
class _EvenSession:
    sessions: _Sessions
    quotas: tuple[int, ...] | None
    share: float | None

    def _open(self, v: ProblemView) -> bool:
        if v.solved:
            return False
        if self.quotas is not None and v.rounds >= self.quotas[v.index]:
            return False
        return self.share is None or v.tokens < self.share

    def choose(self, problems: Sequence[ProblemView]) -> Choice | None:
        open_ = [v for v in problems if self._open(v)]
        if not open_:
            return None
        v = min(open_, key=lambda p: (p.rounds, p.index))
        return Choice(
            v.index,
            self.sessions.feedback(v),
            self.sessions.strategy.name,
            f"pass {v.rounds + 1}: an equal share, unsolved",
        )

    def observe(self, problem: ProblemView, choice: Choice) -> None:
        pass


def spread_evenly(strategy: Strategy) -> SpreadEvenly:
    """``strategy`` with an equal share per problem (see :class:`SpreadEvenly`)."""
    return SpreadEvenly(strategy)


# --- resample until the tests pass ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class ResampleUntilPass(OwnTemperature):
    """The task prompt again, to the unsolved problem with the fewest rounds, until the
    budget is spent; ``temperature`` for every resample (None: the generator's)."""

    @property
    def name(self) -> str:
        return self._named("resample_until_pass")

    def start(self, tasks: Sequence[CodeTask], budget: BatchBudget) -> _ResampleSession:
        """A session over ``tasks``; the budget is the runner's to enforce."""
        return _ResampleSession(self.temperature, self.name)


@dataclass(slots=True)
class _ResampleSession:
    temperature: float | None
    action: str

    def choose(self, problems: Sequence[ProblemView]) -> Choice | None:
        open_ = [v for v in problems if not v.solved]
        if not open_:
            return None
        v = min(open_, key=lambda p: (p.rounds, p.index))
        reason = f"unsolved, fewest rounds ({v.rounds})"
        return Choice(v.index, _resample(v.task, self.temperature), self.action, reason)

    def observe(self, problem: ProblemView, choice: Choice) -> None:
        pass


def resample_until_pass(temperature: float | None = None) -> ResampleUntilPass:
    """Resample unsolved problems in turn until they pass (see :class:`ResampleUntilPass`)."""
    return ResampleUntilPass(temperature)


# --- the error-driven allocator -------------------------------------------------------


def _parse_action(spec: str) -> tuple[str, float | None, Strategy | None]:
    """``resample`` | ``resample@T`` | a strategy spec (``pid``, ``focused``...)."""
    from ._auto import strategy_from_spec  # _auto imports the strategies this module uses

    base, at, value = spec.partition("@")
    if base == "resample":
        if not at:
            return spec, None, None
        try:
            return spec, require_temperature("actions", float(value)), None
        except ValueError:
            raise ConfigurationError("actions", spec, "resample@T needs a number T") from None
    return spec, None, strategy_from_spec(spec)


_DEFAULT_ACTIONS = ("resample", "resample@0.6", "pid")


@dataclass(frozen=True, slots=True)
class ErrorDriven:
    """A budget controller driven by each problem's measured error.

    Each problem's Lyapunov value ``V = ½·(target − best)²`` and its last change decide
    who gets the next generation: a problem whose ``V`` fell in its latest round goes
    first and gets the same action again (it works there); then problems still open (no
    improvement for fewer than ``patience`` rounds), fewest rounds first; a problem
    without improvement for ``patience`` rounds is stuck and releases its share, getting
    rounds again only when nothing else is open. Solved problems get nothing.

    Which action (``actions``: ``resample``, ``resample@T`` or a strategy such as ``pid``,
    whose PID controller sets the intensity and temperature) is measured across the
    batch: each action's share of rounds that lowered a problem's ``V``, with a
    Beta(1, 1) prior so that every action is tried (Laplace's rule of succession); the
    highest share is used.
    """

    actions: tuple[str, ...] = _DEFAULT_ACTIONS
    patience: int = 2

    def __post_init__(self) -> None:
        if not self.actions:
            raise ConfigurationError("actions", self.actions, "name at least one")
        for spec in self.actions:
            _parse_action(spec)
        require_int_at_least("patience", self.patience, 1)

    @property
    def name(self) -> str:
        return (
            "allocator"
            if self.actions == _DEFAULT_ACTIONS
            else ("allocator:" + ",".join(self.actions))
        )

    def start(self, tasks: Sequence[CodeTask], budget: BatchBudget) -> _ErrorDrivenSession:
        """A session over ``tasks``: per-action counts start at zero."""
        parsed = [_parse_action(a) for a in self.actions]
        return _ErrorDrivenSession(
            self.patience,
            {name: (t, None if s is None else _Sessions(s)) for name, t, s in parsed},
        )


@dataclass(slots=True)
class _ErrorDrivenSession:
    patience: int
    menu: dict[str, tuple[float | None, _Sessions | None]]
    tried: dict[str, int] = field(default_factory=dict)
    improved: dict[str, int] = field(default_factory=dict)

    def _rate(self, action: str) -> float:
        return (self.improved.get(action, 0) + 1) / (self.tried.get(action, 0) + 2)

    def _tier(self, v: ProblemView) -> tuple[int, str]:
        if v.dV is not None and v.dV < 0:
            return 0, f"V fell by {-v.dV:.3f} to {v.V:.3f} in round {v.rounds}"
        if v.stalled < self.patience:
            return 1, f"open: V {v.V:.3f}, {v.stalled} round(s) without a fall"
        return 2, f"stuck: {v.stalled} rounds without a fall; only unused budget"

    def choose(self, problems: Sequence[ProblemView]) -> Choice | None:
        open_ = [v for v in problems if not v.solved]
        if not open_:
            return None
        tiers = {v.index: self._tier(v) for v in open_}
        v = min(open_, key=lambda p: (tiers[p.index][0], p.rounds, p.V, p.index))
        tier, why = tiers[v.index]
        last = v.actions[-1] if v.actions else "prompt"
        if tier == 0 and last in self.menu:
            action, how = last, "the same action again"
        else:
            action = max(self.menu, key=self._rate)  # the first of equal rates
            how = (
                f"{action}: {self.improved.get(action, 0)}/{self.tried.get(action, 0)} "
                "rounds lowered V so far (best measured)"
            )
        temperature, sessions = self.menu[action]
        feedback = _resample(v.task, temperature) if sessions is None else sessions.feedback(v)
        return Choice(v.index, feedback, action, f"{why}; {how}")

    def observe(self, problem: ProblemView, choice: Choice) -> None:
        # A failed call counts as a round that did not lower V, as the batch saw it; in a
        # cache-only replay a miss is such a round, which keeps the replay's choices on
        # what the replay can observe.
        self.tried[choice.action] = self.tried.get(choice.action, 0) + 1
        if problem.dV is not None and problem.dV < 0:
            self.improved[choice.action] = self.improved.get(choice.action, 0) + 1


def error_driven(actions: Sequence[str] = _DEFAULT_ACTIONS, *, patience: int = 2) -> ErrorDriven:
    """The error-driven budget allocator (see :class:`ErrorDriven`)."""
    return ErrorDriven(tuple(actions), patience)
