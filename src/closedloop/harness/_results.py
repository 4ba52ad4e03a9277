"""The record of a refinement run: every round, and what was returned.

Pydantic models: runs are written to JSON by the bench and read back for plots.
"""

from __future__ import annotations

from itertools import pairwise

from pydantic import BaseModel, ConfigDict, Field

from ._evaluation import Evaluation

__all__ = ["RefinementResult", "RefinementRound"]

_FROZEN = ConfigDict(frozen=True)


class RefinementRound(BaseModel):
    """One round: what was sent, what came back, how it scored.

    ``feedback`` is the feedback text that produced this round's code (None in round 1
    and for blind retry). ``control``/``level``/``gains`` are the PID signal, the intensity
    it mapped to and the gains in force; ``temperature`` the sampling temperature the
    strategy asked for (None: the generator's own); ``score`` is None when the round was not
    evaluated (interval feedback). ``V``/``dV`` are the Lyapunov monitor's reading.
    """

    model_config = _FROZEN

    index: int = Field(ge=1)
    code: str
    text: str = ""
    evaluation: Evaluation | None = None
    score: float | None = None
    feedback: str | None = None
    control: float | None = None
    level: str | None = None
    gains: tuple[float, float, float] | None = None
    temperature: float | None = None
    V: float | None = None
    dV: float | None = None
    seed: int | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    generation_s: float = 0.0
    evaluation_s: float = 0.0
    cached: bool = False
    error: str | None = None

    @property
    def evaluated(self) -> bool:
        """Whether the evaluator ran on this round's code."""
        return self.evaluation is not None


class RefinementResult(BaseModel):
    """A whole run. ``best_*`` is what the refiner returns: the best evaluated round
    (earliest on ties), so the returned output is never worse than any evaluated round."""

    model_config = _FROZEN

    task: str
    strategy: str
    target: float
    rounds: tuple[RefinementRound, ...]
    best_round: int
    best_code: str
    best_score: float
    stop_reason: str
    stop_detail: str
    trajectory: str | None = None
    choice: str | None = None

    @property
    def scores(self) -> tuple[float | None, ...]:
        """Each round's score, None for rounds not evaluated."""
        return tuple(r.score for r in self.rounds)

    @property
    def evaluator_calls(self) -> int:
        """How many rounds the evaluator ran on."""
        return sum(1 for r in self.rounds if r.evaluated)

    @property
    def regressions(self) -> int:
        """Evaluated rounds that scored below the evaluated round before them."""
        scores = [s for s in self.scores if s is not None]
        return sum(1 for a, b in pairwise(scores) if b < a)

    @property
    def returned_regressed(self) -> bool:
        """True if the returned output scores below the best evaluated round (a bug)."""
        scores = [s for s in self.scores if s is not None]
        return bool(scores) and self.best_score < max(scores)

    @property
    def rounds_to_target(self) -> int | None:
        """The first round that reached the target, if any."""
        for r in self.rounds:
            if r.score is not None and r.score >= self.target - 1e-12:
                return r.index
        return None

    @property
    def prompt_tokens(self) -> int:
        return sum(r.prompt_tokens for r in self.rounds)

    @property
    def completion_tokens(self) -> int:
        return sum(r.completion_tokens for r in self.rounds)

    @property
    def elapsed_s(self) -> float:
        """Generation plus evaluation time over all rounds; a cached generation counts the
        latency of the call that made it, so this is what the run would cost alone."""
        return sum(r.generation_s + r.evaluation_s for r in self.rounds)
