"""When an agent run ends: the policy algebra of :mod:`closedloop.policy` over the run.

``stop_after_steps(12) | stop_after_delay(120) | stop_on_no_progress(3)`` stops when any
part fires; ``&`` stops only when every part fires. Each policy is a frozen dataclass and a
pure function of the run's snapshot, a :class:`LoopState`, so a test builds one by hand and
never sleeps. The names here are presets of the shared strategies whose reason is a
:class:`HaltReason`. A plain callable ``(LoopState) -> bool | HaltReason | None`` is
accepted wherever a policy is; ``True`` from it halts as ``cancelled`` (the caller's own
code chose to stop).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeAlias, cast

from .._exceptions import ConfigurationError
from .._policy import AllOf, AnyOf, Policy, stop_on_fact, when
from .._policy import stop_after_attempt as _stop_after_attempt
from .._policy_state import PolicyState
from .._validation import require_int_at_least, require_non_negative
from ._records import HaltReason

__all__ = [
    "LoopState",
    "StopAll",
    "StopAny",
    "StopFn",
    "StopPolicy",
    "StopWhen",
    "as_stop_policy",
    "stop_after_steps",
    "stop_on_budget",
    "stop_on_no_progress",
    "stop_on_repeats",
]

StopPolicy: TypeAlias = Policy[HaltReason]
"""A policy whose reason is a :class:`HaltReason`: what ends an agent run."""

StopFn = Callable[["LoopState"], "bool | HaltReason | None"]

# Deprecated aliases (one release): the algebra's combinators.
StopAny = AnyOf
StopAll = AllOf

_FACTS: dict[str, Any] = {
    "tokens": 0,
    "cost": 0.0,
    "model_calls": 0,
    "no_progress_steps": 0,
    "repeat_count": 0,
    "replan_count": 0,
    "last_error": None,
    "f_est": 0.0,
    "protocol": "normal",
    "phase": "",
}


class LoopState(PolicyState):
    """The run's snapshot between two steps: a :class:`PolicyState` with the run's facts.

    ``step`` (the state's ``attempt``) counts the steps taken so far; ``elapsed_s`` is the
    time since the run started (from the injected clock); ``no_progress_steps`` counts
    consecutive steps that produced no new valid information; ``repeat_count`` is how
    often the latest action repeated an earlier one. Each fact is also in ``facts``.
    """

    __slots__ = ()

    def __init__(
        self,
        *,
        step: int = 0,
        elapsed_s: float = 0.0,
        tokens: int = 0,
        cost: float = 0.0,
        model_calls: int = 0,
        no_progress_steps: int = 0,
        repeat_count: int = 0,
        replan_count: int = 0,
        last_error: float | None = None,
        f_est: float = 0.0,
        protocol: str = "normal",
        phase: str = "",
    ) -> None:
        super().__init__(
            attempt=step,
            elapsed_s=elapsed_s,
            facts={
                "tokens": tokens,
                "cost": cost,
                "model_calls": model_calls,
                "no_progress_steps": no_progress_steps,
                "repeat_count": repeat_count,
                "replan_count": replan_count,
                "last_error": last_error,
                "f_est": f_est,
                "protocol": protocol,
                "phase": phase,
            },
        )

    def _get(self, name: str) -> Any:
        return self.facts.get(name, _FACTS[name])

    @property
    def step(self) -> int:
        return self.attempt

    @property
    def tokens(self) -> int:
        return cast(int, self._get("tokens"))

    @property
    def cost(self) -> float:
        return cast(float, self._get("cost"))

    @property
    def model_calls(self) -> int:
        return cast(int, self._get("model_calls"))

    @property
    def no_progress_steps(self) -> int:
        return cast(int, self._get("no_progress_steps"))

    @property
    def repeat_count(self) -> int:
        return cast(int, self._get("repeat_count"))

    @property
    def replan_count(self) -> int:
        return cast(int, self._get("replan_count"))

    @property
    def last_error(self) -> float | None:
        return cast("float | None", self._get("last_error"))

    @property
    def f_est(self) -> float:
        return cast(float, self._get("f_est"))

    @property
    def protocol(self) -> str:
        return cast(str, self._get("protocol"))

    @property
    def phase(self) -> str:
        return cast(str, self._get("phase"))


def stop_after_steps(max_steps: int) -> StopPolicy:
    """Halt with ``step_limit`` once ``max_steps`` steps were taken (a cost upper bound)."""
    require_int_at_least("max_steps", max_steps, 1)
    return _stop_after_attempt(max_steps, HaltReason.STEP_LIMIT)


def stop_on_no_progress(steps: int) -> StopPolicy:
    """Halt with ``no_progress`` after ``steps`` consecutive steps without new information."""
    require_int_at_least("steps", steps, 1)
    return stop_on_fact("no_progress_steps", steps, HaltReason.NO_PROGRESS)


def stop_on_repeats(repeats: int) -> StopPolicy:
    """Halt with ``repeated_action`` once the latest action repeated ``repeats`` times."""
    require_int_at_least("repeats", repeats, 1)
    return stop_on_fact("repeat_count", repeats, HaltReason.REPEATED_ACTION)


def stop_on_budget(*, tokens: int | None = None, cost: float | None = None) -> StopPolicy:
    """Halt with ``budget`` once the run used ``tokens`` tokens or ``cost`` dollars."""
    parts: list[StopPolicy] = []
    if tokens is not None:
        require_int_at_least("tokens", tokens, 1)
        parts.append(stop_on_fact("tokens", tokens, HaltReason.BUDGET))
    if cost is not None:
        require_non_negative("cost", cost)
        parts.append(stop_on_fact("cost", cost, HaltReason.BUDGET))
    if not parts:
        raise ConfigurationError("stop_on_budget", None, "give tokens=, cost= or both")
    return parts[0] if len(parts) == 1 else AnyOf(tuple(parts))


def StopWhen(fn: StopFn, reason: HaltReason = HaltReason.CANCELLED) -> StopPolicy:
    """A plain callable as a policy; ``True`` halts with ``reason`` (deprecated: use
    :class:`closedloop.policy.when`)."""
    return cast(StopPolicy, when(cast(Callable[[PolicyState], Any], fn), reason))


def as_stop_policy(value: StopPolicy | StopFn) -> StopPolicy:
    """A policy as is; a plain callable as :class:`closedloop.policy.when` that halts as
    ``cancelled`` on ``True``."""
    if isinstance(value, Policy):
        return value
    if callable(value):
        return StopWhen(value)
    raise ConfigurationError("stop", value, "must be a stop policy or a callable(LoopState)")


def halt_reason(verdict: Any) -> HaltReason | None:
    """A stop policy's verdict as the run's halt: the algebra's policies
    (``closedloop.policy``: ``stop_after_delay`` halts with ``"deadline"``) name the
    reason by its value, the loop's own by the enum."""
    if verdict is None or isinstance(verdict, HaltReason):
        return verdict
    try:
        return HaltReason(verdict)
    except ValueError:
        raise ConfigurationError(
            "stop", verdict, f"a stop policy must halt with one of {[r.value for r in HaltReason]}"
        ) from None
