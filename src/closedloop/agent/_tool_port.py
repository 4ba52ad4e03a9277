"""The step's door to the tools: :class:`ToolPort`, the one place a tool runs.

One call is a pipeline of small parts, each a function of the call's values::

    breaker ─► attempt ─┬─► storm wait ─┐
                        └─► re-check ───┴─► (wait, attempt again) ─► ledger

The **breaker** refuses a call into a tool taken as down (before the call and before each
attempt). An **attempt** is one execution through the executor (contracts, effect ledger;
the executor retries an exception itself), raced against the run's watchers, its answer
an :class:`~closedloop.perception.Observation` with any secret in it as a reference and,
given an event bus, its fault published and the healing answers applied. A 429 that says
when to come back is waited out (**storm wait**, ``ReadRetry.storm``) and not counted;
a read whose answer is a passing fault is asked again, and a doubtful empty answer once
(**re-check**, :class:`~closedloop.agent.ReadRetry`). The **ledger** part records what
the call leaves behind: the effect key, the tool's health, its passing faults.

Every attempt draws on one budget, :class:`Tries` (``1 + max_retries`` of the tool's
settings): the executor's retries of an exception and the loop's of an answer alike. It
is a value each part returns anew, never a counter the parts share. Whether to wait and
ask again is the policy algebra's decision (:mod:`closedloop.policy`): retry when a part
named a reason, unless the wait would end past the run's deadline.

A call knows its step only through a :class:`CallContext`. A secret's value exists for
the call alone: the arguments the executor (and so the ledger) sees name secrets by
reference, the action fills the values in just before its function runs; a reference
that cannot be resolved raises :class:`~closedloop.SecretUnavailableError` before
anything runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from .._exceptions import CircuitOpenError, ToolError
from .._policy_state import NO_DRAWS
from ..control import ActuatorSettings
from ..execution import (
    ActionOutcome,
    AtomicAction,
    Confirmation,
    EffectClass,
    Executor,
    OutcomeStatus,
)
from ..execution._retry_log import collect_tool_retries
from ..execution._secret import RunSecrets, references_in
from ..perception import Observation, ObservationStatus
from ..policy import (
    PROGRAMMING_ERRORS,
    PolicyState,
    RetryPolicy,
    Verdict,
    retry_if_exception_type,
    stop_after_attempt,
    wait_fact,
    wait_fixed,
    when,
)
from ._event_bus import BusHealing, fault_event
from ._health import ToolHealth
from ._inflight import Watch, race
from ._outcome import adopt_secrets, outcome_observation
from ._reads import is_transient
from ._records import ActionCall, HaltReason
from ._repeats import action_signature
from ._settings import LoopSettings
from ._state import ObservationEntry
from ._tools import Tool

__all__ = ["CallContext", "ToolPort", "ToolRun", "Tries"]


_FAULTS = frozenset({ObservationStatus.TIMEOUT.value, ObservationStatus.RATE_LIMITED.value})

_NOT_RUN = (OutcomeStatus.PRECONDITION_FAILED, OutcomeStatus.CONFIRMATION_REQUIRED)
# What the executor may retry within an attempt: made once, it is the same for every call.
_RETRY_ON = retry_if_exception_type(exclude=(*PROGRAMMING_ERRORS, ToolError))


@dataclass(frozen=True, slots=True, kw_only=True)
class CallContext:
    """What one tool call knows of its step: the task, the step, the state view its
    preconditions read, the tool's actuator settings, the tool's newest measured error
    (handed forward with the settings), a human's confirmation, and the newest
    observation (what a repeat after a passing fault is compared with)."""

    task_id: str
    session_id: str
    step: int
    view: Mapping[str, Any]
    settings: ActuatorSettings
    error: float = 0.0
    confirmation: Confirmation | None = None
    latest: ObservationEntry | None = None


@dataclass(frozen=True, slots=True)
class ToolRun:
    """One tool call: the observation (None when the run had to halt first), the
    executor's outcome, the loop's retries of a read (for the step's record), the effect
    key the ledger recorded, and what the port did on its estimates (``acted``)."""

    observation: Observation | None
    outcome: ActionOutcome | None
    halt: HaltReason | None
    retries: tuple[dict[str, Any], ...] = ()
    escalation: str | None = None  # why the event bus's answer hands the run over
    effect_key: str | None = None
    acted: tuple[str, ...] = ()
    confirmation_used: bool = True  # False: refused before the call took a confirmation


@dataclass(frozen=True, slots=True)
class Tries:
    """One call's retry budget as it is spent: ``used`` of ``total`` attempts, the 429
    storm's waits (given back, not counted) and whether an empty answer was re-checked."""

    total: int
    used: int = 0
    storm_waits: int = 0
    storm_waited_s: float = 0.0
    rechecked: bool = False

    @property
    def left(self) -> int:
        return self.total - self.used


@dataclass(frozen=True, slots=True)
class Attempt:
    """One attempt: the action it ran (its timeout may have been widened), the executor's
    outcome and the observation (None: cut off, ``halt`` says why), the attempts it used,
    the tool's own retries, what the event bus's answers did and whether they escalate."""

    action: AtomicAction
    outcome: ActionOutcome | None
    observation: Observation | None
    halt: HaltReason | None = None
    used: int = 0
    inside: tuple[dict[str, Any], ...] = ()
    acted: tuple[str, ...] = ()
    escalation: str | None = None


@dataclass(frozen=True, slots=True)
class Again:
    """Why an answer is asked again, after how long, and the budget it leaves."""

    why: str
    delay_s: float
    tries: Tries
    storm: bool = False


class ToolPort:
    """Runs a validated call through the pipeline of the module.

    Remembers, across steps, which reads answered with a passing fault and when: that is
    what lets the same read be asked again right after one (:meth:`allows_repeat`) and
    what makes an empty answer doubtful.
    """

    def __init__(
        self,
        settings: LoopSettings,
        executor: Executor,
        watch: Watch,
        *,
        health: ToolHealth | None,
        secrets: RunSecrets,
    ) -> None:
        self._settings = settings
        self._watch = watch
        self._health = health
        self._secrets = secrets
        self.executor = executor
        self.recent_faults: dict[str, int] = {}  # tool -> last step it had a passing fault
        self.fault_repeats: dict[str, int] = {}  # signature -> repeats let through after one
        events = settings.events
        self.healing = None if events is None else BusHealing(events, health)
        # Asking a read again: why (a part's reason), after the delay it names, unless the
        # answer in hand is the last this step can have (the wait would end past the
        # run's deadline).
        self._again = RetryPolicy(
            stop=when(
                lambda s: watch.elapsed() + s.fact("delay_s") >= watch.deadline_s, "deadline"
            ),
            wait=wait_fact("delay_s"),
            retry=when(lambda s: s.fact("why")),
        )

    # --- repeats after a passing fault ---------------------------------------------------

    def allows_repeat(self, tool: Tool, signature: str, latest: ObservationEntry | None) -> bool:
        """The same read again, right after its last answer (``latest``) was a passing
        fault: let it run, a bounded number of times (``ReadRetry.repeats_after_fault``)
        so a real loop stops."""
        if not self.may_repeat(tool, signature, latest):
            return False
        self.fault_repeats[signature] = self.fault_repeats.get(signature, 0) + 1
        return True

    def may_repeat(self, tool: Tool, signature: str, latest: ObservationEntry | None) -> bool:
        """Whether :meth:`allows_repeat` would let this call through (nothing used up)."""
        if tool.effect is not EffectClass.RECOMPUTABLE or latest is None:
            return False
        if latest.tool != tool.name or action_signature(latest.tool, latest.arguments) != signature:
            return False
        status = str(latest.observation.get("status", ""))
        if status not in _FAULTS and not (
            status == ObservationStatus.ERROR.value
            and self.recent_faults.get(tool.name) == latest.step
        ):
            return False
        used = self.fault_repeats.get(signature, 0)
        return used < self._settings.read_retry.repeats_after_fault

    # --- the pipeline ----------------------------------------------------------------------

    async def run(self, tool: Tool, call: ActionCall, ctx: CallContext) -> ToolRun:
        """Run ``call`` under the tool's actuator settings (timeout, retry delay, attempts)
        in ``ctx``, the call's narrow view of its step (see the module)."""
        refused = self._breaker(tool, ctx)
        if refused is not None:
            return ToolRun(
                refused.observation,
                refused.outcome,
                None,
                acted=refused.acted,
                confirmation_used=False,
            )
        action, arguments = await self._prepare(tool, call, ctx)
        tries = Tries(1 + int(ctx.settings.max_retries))
        retries: list[dict[str, Any]] = []
        acted: list[str] = []
        escalation: str | None = None
        while True:
            tried = await self._attempt(tool, action, arguments, ctx, tries)
            for entry in tried.inside:
                retries.append({**entry, "attempt": len(retries) + 1})
            acted += tried.acted
            escalation = escalation or tried.escalation
            if tried.outcome is None or tried.observation is None:
                return ToolRun(None, None, tried.halt, tuple(retries), acted=tuple(acted))
            action, tries = tried.action, replace(tries, used=tries.used + tried.used)
            again = None if escalation is not None else self._again_for(tool, tried, ctx, tries)
            delay = self._decide(again, tried.observation, len(retries) + 1)
            if again is None or delay is None:
                break
            retries.append(_retry_entry(len(retries) + 1, tried.observation, again, delay))
            if again.storm:
                acted.append(
                    f"{tool.name}: a 429 waited out {delay:.2f} s (Retry-After); "
                    "the attempt is not counted"
                )
            cut = await self._pause(delay)
            if cut is not None:
                return ToolRun(None, None, cut, tuple(retries), acted=tuple(acted))
            tries = again.tries
        key = self._ledger(tool, tried, ctx)
        return ToolRun(
            tried.observation,
            tried.outcome,
            None,
            tuple(retries),
            escalation,
            effect_key=key,
            acted=tuple(acted),
        )

    def _breaker(
        self, tool: Tool, ctx: CallContext, action: AtomicAction | None = None
    ) -> Attempt | None:
        """No request into a tool taken as down (its breaker is open): the refusal as an
        attempt that used nothing."""
        down = None if self._health is None else self._health.refused(tool.name)
        if down is None:
            return None
        refused = ActionOutcome(
            action=tool.name,
            task_id=ctx.task_id,
            step=ctx.step,
            effect=tool.effect,
            status=OutcomeStatus.PRECONDITION_FAILED,
            error=CircuitOpenError(down),
        )
        observed = outcome_observation(refused, tool.name, self._settings.wall_clock())
        note = f"breaker open: {tool.name} was not called ({down})"
        return Attempt(action or tool.action, refused, observed, acted=(note,))

    async def _prepare(
        self, tool: Tool, call: ActionCall, ctx: CallContext
    ) -> tuple[AtomicAction, Mapping[str, Any]]:
        """The action with the secrets' values and the call's timeout, and the arguments
        as the ledger sees them (a secret the model wrote out in clear is a reference)."""
        secrets = self._secrets
        arguments = secrets.adopt(call.arguments)
        values = await secrets.resolve(references_in(arguments))
        action = tool.action.with_secret_values(values)
        if not tool.fixed_timeout:
            measured = None if self._health is None else self._health.timeout_s(tool.name)
            timeout_s = ctx.settings.timeout_ms / 1000.0 if measured is None else measured
            action = action.with_timeout(max(0.001, timeout_s))
        return action, arguments

    async def _attempt(
        self,
        tool: Tool,
        action: AtomicAction,
        arguments: Mapping[str, Any],
        ctx: CallContext,
        tries: Tries,
    ) -> Attempt:
        """One execution; the executor retries an exception within what ``tries`` has left."""
        cfg = self._settings
        refused = self._breaker(tool, ctx, action)
        if refused is not None:  # the breaker opened on an earlier attempt
            return refused
        healing = self.healing
        if healing is not None and not tool.fixed_timeout and action.timeout_s is not None:
            action = action.with_timeout(healing.timeout_s(tool.name, action.timeout_s))
        retry = RetryPolicy(
            stop_after_attempt(max(1, tries.left)),
            wait_fixed(max(0.0, ctx.settings.retry_delay_ms / 1000.0)),
            _RETRY_ON,
        )
        started = cfg.clock()
        with collect_tool_retries() as inside:  # a tool's own retries (an MCP reconnect)
            outcome, halt = await race(
                self.executor.execute(
                    action,
                    arguments,
                    task_id=ctx.task_id,
                    step=ctx.step,
                    confirmation=ctx.confirmation,
                    retry=retry,
                    state=ctx.view,
                ),
                self._watch.watchers(),
            )
        if outcome is None:
            return Attempt(action, None, None, halt, inside=tuple(inside))
        observed = outcome_observation(outcome, tool.name, cfg.wall_clock())
        latency = cfg.clock() - started
        if self._health is not None:
            self._health.record_latency(tool.name, latency)
        observed = adopt_secrets(self._secrets, observed)
        tried = Attempt(
            action, outcome, observed, used=max(1, outcome.attempts), inside=tuple(inside)
        )
        if healing is None:
            return tried
        event = fault_event(
            observed,
            source=tool.name,
            session_id=ctx.session_id,
            timeout_s=action.timeout_s,
            latency_s=max(0.0, latency),
        )
        if event is None:
            return tried
        healed = await healing.heal(event, fixed_timeout=tool.fixed_timeout)
        return replace(tried, acted=healed.acted, escalation=healed.escalation)

    def _again_for(
        self, tool: Tool, tried: Attempt, ctx: CallContext, tries: Tries
    ) -> Again | None:
        """Why a read's answer is worth asking again: a 429 storm waited out, else a
        passing fault or a doubtful empty answer (None: it is not)."""
        outcome, observation = tried.outcome, tried.observation
        read = tool.effect is EffectClass.RECOMPUTABLE
        if observation is None or outcome is None or not (read and outcome.ok):
            return None
        return self._storm_wait(tool, observation, ctx, tries) or self._recheck(
            tool, observation, ctx, tries
        )

    def _storm_wait(
        self, tool: Tool, observation: Observation, ctx: CallContext, tries: Tries
    ) -> Again | None:
        """A 429 that says when to come back, waited out that long: the refused attempt is
        given back."""
        policy = self._settings.read_retry
        storm = policy.storm_delay_s(observation)
        if storm is None or policy.storm is None:
            return None
        if not policy.storm.allows(tries.storm_waits, tries.storm_waited_s, storm):
            return None
        self.recent_faults[tool.name] = ctx.step
        spent = replace(
            tries,
            used=tries.used - 1,
            storm_waits=tries.storm_waits + 1,
            storm_waited_s=tries.storm_waited_s + storm,
        )
        return Again("429 storm waited out (Retry-After)", storm, spent, storm=True)

    def _recheck(
        self, tool: Tool, observation: Observation, ctx: CallContext, tries: Tries
    ) -> Again | None:
        """A passing fault asked again, or a doubtful empty answer checked once more; each
        an attempt of the same budget."""
        policy = self._settings.read_retry
        why, left = None, tries.left > 0
        if policy.should_retry(observation) and left:
            why = "passing fault"
            self.recent_faults[tool.name] = ctx.step
        elif (
            observation.status is ObservationStatus.EMPTY
            and policy.enabled
            and policy.recheck_empty
            and not tries.rechecked
            and left
            and self._doubtful(tool.name, ctx)
        ):
            why = "empty answer re-checked (the tool's error is high or it failed recently)"
            tries = replace(tries, rechecked=True)
        if why is None:
            return None
        return Again(why, policy.delay_s(observation, ctx.settings.retry_delay_ms), tries)

    def _decide(self, again: Again | None, observation: Observation, attempt: int) -> float | None:
        """The policy's decision on asking again: the wait, or None (stop)."""
        if again is None:
            return None
        state = PolicyState(
            attempt=attempt,
            outcome=observation,
            facts={"why": again.why, "delay_s": again.delay_s},
            rng=NO_DRAWS,  # the read retry's policy draws no jitter
        )
        decision = self._again.decide(state)
        return decision.delay_s if decision.verdict is Verdict.WAIT else None

    async def _pause(self, delay: float) -> HaltReason | None:
        """The wait before asking again; cancellation and the budget may cut it (the
        deadline was checked before)."""
        if delay <= 0:
            return None
        watchers: dict[HaltReason, Callable[[], Any]] = {
            k: w for k, w in self._watch.watchers().items() if k is not HaltReason.DEADLINE
        }
        _, cut = await race(self._settings.sleep(delay), watchers)
        return cut

    def _ledger(self, tool: Tool, tried: Attempt, ctx: CallContext) -> str | None:
        """What the call leaves behind: the tool's health, its passing fault, the effect
        key of an effect that reached the ledger."""
        outcome, observation = tried.outcome, tried.observation
        assert outcome is not None and observation is not None
        health, policy = self._health, self._settings.read_retry
        if health is not None and outcome.status is not OutcomeStatus.PRECONDITION_FAILED:
            health.record_call(tool.name, failed=is_transient(observation))
        read = tool.effect is EffectClass.RECOMPUTABLE
        if read and policy.should_retry(observation):
            self.recent_faults[tool.name] = ctx.step
        if outcome.status in _NOT_RUN:
            return None
        return outcome.effect_key or None

    def _doubtful(self, tool: str, ctx: CallContext) -> bool:
        """Whether an empty answer of ``tool`` might be a fault's: a high error signal (the
        tool's control output or its last error) or a passing fault in the last few steps."""
        policy = self._settings.read_retry
        if max(ctx.settings.u, ctx.error) >= policy.empty_error:
            return True
        last = self.recent_faults.get(tool)
        return last is not None and ctx.step - last <= policy.recent_steps


def _retry_entry(number: int, answer: Observation, again: Again, delay: float) -> dict[str, Any]:
    """One retry as the step's record keeps it."""
    return {
        "attempt": number,
        "status": answer.status.value,
        "error": answer.error,
        "delay_s": delay,
        "reason": again.why,
    }
