"""The world's reads as loop tools that retry through the executor, and the actuator schedule."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from closedloop._exceptions import ActionError
from closedloop.agent import ControlConfig, ErrorMetric, as_tool
from closedloop.control import (
    ActuatorSchedule,
    schedule_levels,
    schedule_linear,
    schedule_strictness,
)
from closedloop.decision import HybridController, default_rules
from closedloop.execution import AtomicAction, Condition, canonical_json, normalise
from closedloop.perception import Observation, ObservationStatus
from closedloop.policy import (
    PolicyState,
    RetryPolicy,
    Wait,
    retry_async,
    retry_if_exception_type,
    stop_after_attempt,
)

from .._plumbing import http_status, problem_of
from .._tools import WorldTools

__all__ = ["ControlledReads", "reference_control", "reference_schedule"]


@dataclass(frozen=True, slots=True)
class _wait_linear(Wait):
    """``step_s`` times the attempts made so far: a backoff that grows by a step."""

    step_s: float

    def __call__(self, state: PolicyState) -> float:
        return self.step_s * state.attempt


class ControlledReads:
    """The world's reads as loop tools whose passing failures raise, so the executor retries.

    The loop retries only exceptions, with the attempts, delay and timeout its PID schedules
    for the tool; a read that returns a 503 observation would never be retried. Known
    causes go through the hybrid controller's rules first: 429 backs off (Retry-After,
    capped), 5xx, timeouts and stale cache stand-ins retry; an incomplete answer is asked
    again twice, an empty one once (to confirm "no match"). Definite answers return.
    Every attempt is counted, so a step's error can include the failures its retries hid.
    """

    def __init__(
        self,
        world: WorldTools,
        *,
        sleep: Callable[[float], Awaitable[None]],
        clock: Callable[[], float],
        max_backoff_s: float = 2.0,
    ) -> None:
        self.world = world
        self.sleep = sleep
        self.max_backoff_s = max_backoff_s
        self.rules = HybridController(default_rules(), tolerance=0.0, clock=clock)
        self.attempts: dict[str, list[bool]] = {}
        self.empties: set[str] = set()

    def patient(self, action: AtomicAction, attempts: int = 5) -> AtomicAction:
        """``action`` whose preconditions and reconciler retry a passing failure of the reads
        they make. The executor retries the call, not these: one 503 on the read that asks
        "was this booked already?" would otherwise refuse or strand the effect for good."""

        # A failed read is asked again after 0.1 s, 0.2 s, …; the last failure is raised.
        policy = RetryPolicy(
            stop_after_attempt(attempts), _wait_linear(0.1), retry_if_exception_type(ActionError)
        )

        async def again(fn: Callable[..., Any], *args: Any) -> Any:
            async def attempt(_: int) -> Any:
                result = fn(*args)
                return await result if inspect.isawaitable(result) else result

            return (await retry_async(attempt, policy, sleep=self.sleep)).unwrap()

        def wrap(condition: Condition) -> Condition:
            async def check(args: Mapping[str, Any], state: Mapping[str, Any]) -> Any:
                return await again(condition.check, args, state)

            return Condition(condition.name, check)

        reconciler = action.reconciler
        patient_reconciler = None
        if reconciler is not None:

            async def patient_reconciler(args: Mapping[str, Any], record: Any) -> Any:
                return await again(reconciler, args, record)

        checks = tuple(wrap(c) for c in action.preconditions if isinstance(c, Condition))
        return dataclasses.replace(action, preconditions=checks, reconciler=patient_reconciler)

    def tool(self, name: str) -> Any:
        schema = as_tool(getattr(self.world, name)).openai_schema()

        async def read(**arguments: Any) -> Observation:
            return await self._read(name, arguments)

        read.__name__ = name
        return (schema, read)

    async def _read(self, name: str, arguments: Mapping[str, Any]) -> Observation:
        observation: Observation = await getattr(self.world, name)(**arguments)
        key = self._key(name, arguments)
        if observation.status is ObservationStatus.EMPTY and key not in self.empties:
            # "No match" is confirmed by asking again before anything depends on
            # it (within this attempt, so confirming costs no retry).
            self.empties.add(key)
            observation = await getattr(self.world, name)(**arguments)
        status = observation.status
        tries = self.attempts.setdefault(key, [])
        # A stale answer is the cache standing in for a failed call: after an effect it is
        # the world before it, so ask again rather than act on it.
        passing = status in (
            ObservationStatus.RATE_LIMITED,
            ObservationStatus.TIMEOUT,
            ObservationStatus.STALE,
        )
        if status is ObservationStatus.ERROR:
            code = http_status(observation)
            passing = code is None or code >= 500 or problem_of(observation) is None
        elif status is ObservationStatus.PARTIAL and len(tries) < 2:
            passing = True  # an incomplete answer is asked twice more before it is used
        tries.append(not passing)
        if not passing:
            self.rules.forget(name)
            return observation
        decision = await self.rules.decide([observation])
        if decision.action == "back_off":
            await self.sleep(min(float(decision.params.get("delay_s", 1.0)), self.max_backoff_s))
        raise ActionError(f"{name}: {observation.meaning} ({decision.action}: {decision.reason})")

    @staticmethod
    def _key(name: str, arguments: Mapping[str, Any]) -> str:
        args = {k: v for k, v in arguments.items() if v is not None}
        return f"{name}:{canonical_json(normalise(args))}"

    def failure_share(self, name: str, arguments: Mapping[str, Any]) -> float:
        """The share of failed attempts of one call (the error its retries absorbed)."""
        tries = self.attempts.pop(self._key(name, arguments), [])
        return 0.0 if not tries else tries.count(False) / len(tries)

    def metric(self) -> ErrorMetric:
        """A read's error: 1 for a failure, 0.5 for a degraded answer, 0 for a definite one
        (an empty list and a refusal are information), raised by the failed attempts."""

        def error(action: Any, observation: Observation) -> float:
            status = observation.status
            if status in (ObservationStatus.OK, ObservationStatus.EMPTY):
                base = 0.0
            elif status in (ObservationStatus.PARTIAL, ObservationStatus.STALE):
                base = 0.5
            else:
                base = 0.0 if problem_of(observation) is not None else 1.0
            args = action.arguments if action is not None else {}
            return max(base, self.failure_share(observation.source, args))

        return error


def reference_schedule() -> ActuatorSchedule:
    """Actuators of the reference agents: 2–4 retries and a 2–6 s timeout as u rises (seed
    000: the more the controller pushes, the more patient); strict decoding from u = 0.7."""
    return ActuatorSchedule(
        strictness=schedule_strictness(0.7),
        retry_delay_ms=schedule_linear(50.0, 450.0),
        timeout_ms=schedule_linear(2_000.0, 4_000.0),
        max_retries=schedule_levels((2, 3, 4), (0.3, 0.6)),
    )


def reference_control(**overrides: Any) -> ControlConfig:
    """The reference agents' ``ControlConfig``: the default gains and :func:`reference_schedule`."""
    overrides.setdefault("schedule", reference_schedule())
    return ControlConfig(**overrides)
