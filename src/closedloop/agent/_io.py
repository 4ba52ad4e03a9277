"""The step's two doors to the outside: the model and the tools.

:class:`ModelPort` is the one place that calls a model, :class:`ToolPort` the one place
that runs a tool. Each call is raced against the run's watchers (deadline, budget,
cancellation), so it ends when the run must, not when the call returns; each returns a
value and changes nothing of the task state: what a call spent, the effect it
recorded and a failure worth noting come back in the value, for the step to fold in. The
model port charges the run's live budget; the tool port remembers passing faults.

The tool port is also where a secret meets its value: the arguments a call hands the
executor (and so the effect ledger) name secrets by reference, the values are resolved
here, once per call, and filled in by the action itself just before its function runs;
a secret the tool answers with reaches the model as a reference too.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from .._exceptions import (
    CircuitOpenError,
    ModelAuthError,
    ModelError,
    ModelLoadError,
    ModelNotAvailableError,
    ModelUnreachableError,
    RealModelCallBlockedError,
    SchemaCompileError,
    ToolError,
)
from ..control import ActuatorSettings
from ..execution import (
    ActionOutcome,
    Confirmation,
    EffectClass,
    Executor,
    OutcomeStatus,
)
from ..execution._retry_log import collect_tool_retries
from ..execution._secret import RunSecrets, references_in
from ..models import Completion, Model, ModelLadder, ModelRequest, Rung
from ..perception import Observation, ObservationStatus
from ..policy import (
    PROGRAMMING_ERRORS,
    PolicyDecision,
    PolicyState,
    RetryPolicy,
    retry_async,
    retry_if_exception_type,
    stop_after_attempt,
    wait_fact,
    wait_fixed,
    when,
)
from ._event_bus import BusHealing, fault_event
from ._health import ToolHealth
from ._inflight import Budget, race
from ._reads import is_transient
from ._records import ActionCall, HaltReason, RungUsage, RunUsageSummary
from ._repeats import action_signature
from ._settings import LoopSettings
from ._state import ObservationEntry
from ._tools import Tool, to_observation

__all__ = [
    "FATAL_MODEL_ERRORS",
    "CallContext",
    "ModelCall",
    "ModelPort",
    "ToolPort",
    "ToolRun",
    "Usage",
    "Watch",
    "outcome_observation",
]

FATAL_MODEL_ERRORS: tuple[type[BaseException], ...] = (
    ModelNotAvailableError,
    ModelLoadError,
    ModelAuthError,
    ModelUnreachableError,
    RealModelCallBlockedError,
)
"""Model errors no further step can cure: they propagate and the run ends with its own
halt (``model_unavailable``, ``model_unreachable``; ``error`` for a blocked real call). A
server that cannot be reached is one of them: the client has already retried the
connection, and a loop of steps that cannot call the model would only end in its step
limit, hiding why."""

Usage = dict[str, float]
"""A step's model usage while it adds up: calls, prompt and completion tokens, cost."""


def new_usage() -> Usage:
    return {"model_calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "cost": 0.0}


@dataclass(frozen=True, slots=True)
class ModelCall:
    """One model call: its completion, or why the run halts, or why the call failed."""

    completion: Completion | None
    halt: HaltReason | None = None
    failure: str | None = None


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


class Watch(Protocol):
    """The run's clock and watchers, which every call is raced against (``_run.Run``)."""

    deadline_s: float

    def elapsed(self) -> float: ...

    def watchers(self) -> dict[HaltReason, Callable[[], Any]]: ...


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


# --- the model -----------------------------------------------------------------------


class ModelPort:
    """Calls a model for the run and charges the call to the run's live budget; the
    caller's ``usage`` adds it up for the task state."""

    def __init__(self, settings: LoopSettings, budget: Budget | None, watch: Watch) -> None:
        self._settings = settings
        self._budget = budget
        self._watch = watch
        # False once a model could not compile a response schema: decode loosely from
        # then on; the validator still checks every reply. ``grammar_failure`` says why.
        self.grammar_ok = True
        self.grammar_failure: str | None = None
        self._single: ModelLadder | None = None

    def _charge(self, completion: Completion, usage: Usage, price: Rung | None = None) -> None:
        u = completion.usage
        cost = (
            completion.cost_usd or 0.0
            if price is None
            else price.cost(u.prompt_tokens, u.completion_tokens, completion.cost_usd)
        )
        usage["model_calls"] += 1
        usage["prompt_tokens"] += u.prompt_tokens
        usage["completion_tokens"] += u.completion_tokens
        usage["cost"] += cost
        if self._budget is not None:
            self._budget.charge(u.total_tokens, cost)

    def budget_left(self) -> tuple[int | None, float | None] | None:
        """What the run's live budget has left (None: the run has none)."""
        b = self._budget
        return None if b is None else (b.tokens_left, b.cost_left)

    async def complete(
        self,
        model: Model,
        messages: Sequence[Mapping[str, str]],
        usage: Usage,
        *,
        schema: Mapping[str, Any] | None,
        tools: Sequence[Mapping[str, Any]] | None,
        seed: int,
        temperature: float,
        max_tokens: int | None = None,
        price: Rung | None = None,
    ) -> ModelCall:
        """One model call raced against the watchers; ``price`` is the ladder rung whose
        price (where it has one) charges the call."""
        watch, budget = self._watch, self._budget
        limit = max_tokens or self._settings.max_tokens
        if budget is not None and budget.tokens_left is not None:
            limit = max(1, min(limit, budget.tokens_left))
        remaining = watch.deadline_s - watch.elapsed()
        call = model.complete(
            [dict(m) for m in messages],
            ModelRequest(
                response_schema=schema if self.grammar_ok else None,
                max_tokens=limit,
                temperature=temperature,
                seed=seed,
                timeout=remaining if remaining > 0 else None,
                tools=tuple(tools or ()),
                logprobs=self._settings.logprobs,
            ),
        )
        try:
            completion, halt = await race(call, watch.watchers())
        except SchemaCompileError as exc:
            self.grammar_ok = False
            self.grammar_failure = f"constrained decoding unavailable: {exc}"
            return await self.complete(
                model,
                messages,
                usage,
                schema=None,
                tools=tools,
                seed=seed,
                temperature=temperature,
                max_tokens=max_tokens,
                price=price,
            )
        except FATAL_MODEL_ERRORS:
            raise
        except ModelError as exc:
            return ModelCall(None, None, f"the model call failed ({type(exc).__name__}: {exc})")
        if completion is not None:
            self._charge(completion, usage, price)
        return ModelCall(completion, halt)

    def ladder(self) -> ModelLadder:
        """The run's model ladder (a single model is a ladder of one rung)."""
        cfg = self._settings
        if cfg.ladder is not None:
            return cfg.ladder
        if self._single is None or self._single.rungs[0].model is not cfg.model:
            self._single = ModelLadder((Rung(cfg.model),))
        return self._single

    def rung_model(self, settings: ActuatorSettings) -> Model:
        """The model a proposal made under ``settings`` runs on."""
        return self.ladder().rung(settings.rung).model

    async def sample(
        self,
        messages: Sequence[Mapping[str, str]],
        *,
        schema: Mapping[str, Any] | None,
        tools: Sequence[Mapping[str, Any]] | None,
        dual: bool,
        step: int,
        settings: ActuatorSettings | None = None,
    ) -> tuple[list[ModelCall], RunUsageSummary]:
        """The proposal's calls, on the ladder's rung ``settings.rung`` (the cheapest by
        default): one sample at the agent's temperature, and ``settings.votes - 1`` more
        at the dual temperature (at least one more under dual verification, from the
        verifier where there is one), all at the same time, seeded by the ``step``. The
        usage is split by rung."""
        cfg = self._settings
        ladder = self.ladder()
        index = 0 if settings is None else ladder.index(settings.rung)
        rung = ladder.rungs[index]
        k = max(2 if dual else 1, 1 if settings is None else settings.votes)
        usage = new_usage()
        seed = cfg.seed + step
        plans = [(rung.model, seed, cfg.temperature)]
        for i in range(1, k):
            model = cfg.verifier if (dual and i == 1 and cfg.verifier is not None) else rung.model
            plans.append((model, seed + 7919 * i, cfg.dual_temperature))
        clock = cfg.clock
        started = clock()
        samples = [
            self.complete(
                model,
                messages,
                usage,
                schema=schema,
                tools=tools,
                seed=s,
                temperature=t,
                price=rung,
            )
            for model, s, t in plans
        ]
        # One sample needs no task of its own to run at the same time as nothing else.
        calls = [await samples[0]] if len(samples) == 1 else list(await asyncio.gather(*samples))
        seconds = max(0.0, clock() - started)
        calls_made = int(usage["model_calls"])
        spent = RungUsage(
            rung=index,
            model=rung.name,
            model_calls=calls_made,
            prompt_tokens=int(usage["prompt_tokens"]),
            completion_tokens=int(usage["completion_tokens"]),
            seconds=seconds,
            cost=usage["cost"],
        )
        summary = RunUsageSummary(
            model_calls=calls_made,
            prompt_tokens=int(usage["prompt_tokens"]),
            completion_tokens=int(usage["completion_tokens"]),
            cost=usage["cost"],
            rungs=[spent],
        )
        return calls, summary


# --- tools ------------------------------------------------------------------------------


def outcome_observation(outcome: ActionOutcome, source: str, now: float) -> Observation:
    """What one execution told the loop, as an observation the model reads next step."""
    if outcome.ok:
        obs = to_observation(outcome.result, source=source, timestamp=now)
        if outcome.status is OutcomeStatus.REPLAYED:
            obs = obs.model_copy(
                update={
                    "meaning": f"{obs.meaning} (the recorded result; the effect was not repeated)"
                }
            )
        return obs
    error = f"{type(outcome.error).__name__}: {outcome.error}" if outcome.error else outcome.status
    meanings = {
        OutcomeStatus.PRECONDITION_FAILED: f"{source} was not run: {outcome.error}",
        OutcomeStatus.CONFIRMATION_REQUIRED: f"{source} was not run: it needs a human confirmation",
        OutcomeStatus.POSTCONDITION_FAILED: (
            f"{source} ran but its result failed a check: {outcome.error}"
        ),
        OutcomeStatus.RECONCILIATION_REQUIRED: (
            f"{source} may or may not have taken effect; it must be reconciled before anything "
            "else relies on it"
        ),
        OutcomeStatus.TIMED_OUT: f"{source} did not answer in time: {outcome.error}",
    }
    meaning = meanings.get(outcome.status, f"{source} failed: {error}")
    if outcome.status is OutcomeStatus.TIMED_OUT:
        return Observation(
            value=None,
            confidence=0.0,
            timestamp=now,
            source=source,
            status=ObservationStatus.TIMEOUT,
            meaning=meaning,
            error=str(error),
        )
    return Observation.failed(str(error), source=source, timestamp=now, meaning=meaning)


def _adopt_secrets(secrets: RunSecrets, observation: Observation) -> Observation:
    """The observation with any secret in its text as a reference (the model reads it)."""
    update = {
        name: adopted
        for name in ("value", "meaning", "error")
        if (adopted := secrets.adopt(getattr(observation, name))) is not getattr(observation, name)
    }
    return observation.model_copy(update=update) if update else observation


class _Halted(Exception):
    """The run must end during the wait before a read is asked again."""

    def __init__(self, reason: HaltReason) -> None:
        super().__init__(reason)
        self.reason = reason


_NO_DRAWS = random.Random(0)  # the read retry's policy draws no jitter: one source for all

_FAULTS = frozenset({ObservationStatus.TIMEOUT.value, ObservationStatus.RATE_LIMITED.value})


class ToolPort:
    """Runs a validated call through the executor (contracts, effect ledger, retries).

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
        # Asking a read again: why (the facts :meth:`run` observes), after the delay they name,
        # unless the answer in hand is the last this step can have (the wait would end
        # past the run's deadline).
        self._again = RetryPolicy(
            stop=when(
                lambda s: watch.elapsed() + s.fact("delay_s") >= watch.deadline_s, "deadline"
            ),
            wait=wait_fact("delay_s"),
            retry=when(lambda s: s.fact("why")),
        )

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
        last = latest
        if last.tool != tool.name or action_signature(last.tool, last.arguments) != signature:
            return False
        status = str(last.observation.get("status", ""))
        if status not in _FAULTS and not (
            status == ObservationStatus.ERROR.value
            and self.recent_faults.get(tool.name) == last.step
        ):
            return False
        used = self.fault_repeats.get(signature, 0)
        return used < self._settings.read_retry.repeats_after_fault

    async def run(self, tool: Tool, call: ActionCall, ctx: CallContext) -> ToolRun:
        """Run ``call`` under the tool's actuator settings (timeout, retry delay, attempts)
        in ``ctx``, the call's narrow view of its step.

        A read (``recomputable``) whose answer is a passing fault is asked again here,
        within the same ``max_retries`` the executor has for exceptions (see
        ``_reads.py``), by the one retry driver of :mod:`closedloop.policy`; each retry
        goes into the returned :class:`ToolRun`.

        With an event bus (``Runtime(events=...)``), each attempt's fault is published and
        the healing actions answering it are applied (``_event_bus.py``).

        A reference to a secret that cannot be resolved raises
        :class:`~closedloop.SecretUnavailableError` before anything runs: the run ends
        with ``secret_unavailable``.
        """
        cfg, watch, secrets = self._settings, self._watch, self._secrets
        settings = ctx.settings
        health = self._health
        healing = self.healing
        acted: list[str] = []
        if healing is not None:
            healing.escalation = None  # an escalation hands over the call that heard it

        def tool_down() -> ActionOutcome | None:
            # No request into a tool taken as down (its breaker is open).
            down = None if health is None else health.refused(tool.name)
            if down is None:
                return None
            acted.append(f"breaker open: {tool.name} was not called ({down})")
            return ActionOutcome(
                action=tool.name,
                task_id=ctx.task_id,
                step=ctx.step,
                effect=tool.effect,
                status=OutcomeStatus.PRECONDITION_FAILED,
                error=CircuitOpenError(down),
            )

        refused = tool_down()
        if refused is not None:
            now = cfg.wall_clock()
            observed = outcome_observation(refused, tool.name, now)
            return ToolRun(observed, refused, None, (), acted=tuple(acted), confirmation_used=False)
        measured = None if health is None else health.timeout_s(tool.name)
        # A secret the model wrote out in clear becomes a reference like the others, so the
        # ledger's arguments and key never hold a value; the values exist for this call only.
        arguments = secrets.adopt(call.arguments)
        values = await secrets.resolve(references_in(arguments))
        action = tool.action.with_secret_values(values)
        if not tool.fixed_timeout:
            timeout_s = settings.timeout_ms / 1000.0 if measured is None else measured
            action = action.with_timeout(max(0.001, timeout_s))
        policy = cfg.read_retry
        read = tool.effect is EffectClass.RECOMPUTABLE
        budget = 1 + int(settings.max_retries)
        used = 0  # the executor's attempts so far: asking again spends the same budget
        rechecked = False
        storm_waits, storm_waited = 0, 0.0  # 429s waited out in this call, not counted
        outcome: ActionOutcome | None = None
        halt: HaltReason | None = None
        retries: list[dict[str, Any]] = []
        confirmation = ctx.confirmation  # a human's approval covers this call only

        executor_wait = wait_fixed(max(0.0, settings.retry_delay_ms / 1000.0))
        executor_retry = retry_if_exception_type(exclude=(*PROGRAMMING_ERRORS, ToolError))

        async def attempt(_: int) -> Observation | None:
            nonlocal action, outcome, halt, used
            # The executor retries exceptions within what is left of the budget.
            retry = RetryPolicy(
                stop_after_attempt(max(1, budget - used)), executor_wait, executor_retry
            )
            refused = tool_down()
            if refused is not None:  # the breaker opened on an earlier attempt
                outcome = refused
                return outcome_observation(refused, tool.name, cfg.wall_clock())
            if healing is not None and not tool.fixed_timeout and action.timeout_s is not None:
                action = action.with_timeout(healing.timeout_s(tool.name, action.timeout_s))
            started = cfg.clock()
            with collect_tool_retries() as inside:  # a tool's own retries (an MCP reconnect)
                outcome, halt = await race(
                    self.executor.execute(
                        action,
                        arguments,
                        task_id=ctx.task_id,
                        step=ctx.step,
                        confirmation=confirmation,
                        retry=retry,
                        state=ctx.view,
                    ),
                    watch.watchers(),
                )
            for entry in inside:
                retries.append({**entry, "attempt": len(retries) + 1})
            if outcome is None:
                return None
            used += max(1, outcome.attempts)
            observed = outcome_observation(outcome, tool.name, cfg.wall_clock())
            latency = cfg.clock() - started
            if health is not None:
                health.record_latency(tool.name, latency)
            observed = _adopt_secrets(secrets, observed)
            if healing is not None:
                event = fault_event(
                    observed,
                    source=tool.name,
                    session_id=ctx.session_id,
                    timeout_s=action.timeout_s,
                    latency_s=max(0.0, latency),
                )
                if event is not None:
                    acted.extend(await healing.heal(event, fixed_timeout=tool.fixed_timeout))
            return observed

        def observe(_: int, observation: Any, error: BaseException | None) -> dict[str, Any]:
            # Why this answer is worth asking again (the retry slot) and after how long.
            nonlocal rechecked, storm_waits, storm_waited, used
            if observation is None or outcome is None or not (read and outcome.ok):
                return {}
            if healing is not None and healing.escalation is not None:
                return {}  # the run hands over: no more attempts
            storm = policy.storm_delay_s(observation)
            if (
                storm is not None
                and policy.storm is not None
                and policy.storm.allows(storm_waits, storm_waited, storm)
            ):
                # The service said when to come back: the refused attempt is given back.
                storm_waits += 1
                storm_waited += storm
                used -= 1
                self.recent_faults[tool.name] = ctx.step
                return {"why": "429 storm waited out (Retry-After)", "delay_s": storm}
            why = None
            if policy.should_retry(observation) and used < budget:
                why = "passing fault"
                self.recent_faults[tool.name] = ctx.step
            elif (
                observation.status is ObservationStatus.EMPTY
                and policy.enabled
                and policy.recheck_empty
                and not rechecked
                and used < budget  # a re-check is an attempt: it spends the same budget
                and self._doubtful(tool.name, settings.u, ctx)
            ):
                why = "empty answer re-checked (the tool's error is high or it failed recently)"
                rechecked = True
            if why is None:
                return {}
            delay = policy.delay_s(observation, settings.retry_delay_ms) if used < budget else 0.0
            return {"why": why, "delay_s": delay}

        def record(state: PolicyState, decision: PolicyDecision) -> None:
            answer: Observation = state.outcome
            if answer.status is ObservationStatus.RATE_LIMITED and str(
                state.fact("why")
            ).startswith("429 storm"):
                acted.append(
                    f"{tool.name}: a 429 waited out {decision.delay_s:.2f} s (Retry-After); "
                    "the attempt is not counted"
                )
            retries.append(
                {
                    "attempt": len(retries) + 1,
                    "status": answer.status.value,
                    "error": answer.error,
                    "delay_s": decision.delay_s,
                    "reason": state.fact("why"),
                }
            )

        async def pause(delay: float) -> None:
            if delay > 0:
                # Cancellation and the budget may cut the wait; the deadline was checked before.
                watchers: dict[HaltReason, Callable[[], Any]] = {
                    k: w for k, w in watch.watchers().items() if k is not HaltReason.DEADLINE
                }
                _, cut = await race(cfg.sleep(delay), watchers)
                if cut is not None:
                    raise _Halted(cut)

        try:
            done = await retry_async(
                attempt,
                self._again,
                sleep=pause,
                rng=_NO_DRAWS,
                observe=observe,
                before_sleep=record,
                passthrough=(Exception,),  # the executor retried exceptions already
            )
        except _Halted as stop:
            return ToolRun(None, None, stop.reason, tuple(retries), acted=tuple(acted))
        observation = done.value
        if outcome is None or observation is None:
            return ToolRun(None, None, halt, tuple(retries), acted=tuple(acted))
        if health is not None and outcome.status is not OutcomeStatus.PRECONDITION_FAILED:
            health.record_call(tool.name, failed=is_transient(observation))
        if read and policy.should_retry(observation):
            self.recent_faults[tool.name] = ctx.step
        not_run = (OutcomeStatus.PRECONDITION_FAILED, OutcomeStatus.CONFIRMATION_REQUIRED)
        key = outcome.effect_key if outcome.status not in not_run else None
        escalation = None if healing is None else healing.escalation
        return ToolRun(
            observation,
            outcome,
            None,
            tuple(retries),
            escalation,
            effect_key=key or None,
            acted=tuple(acted),
        )

    def _doubtful(self, tool: str, u: float, ctx: CallContext) -> bool:
        """Whether an empty answer of ``tool`` might be a fault's: a high error signal (the
        tool's control output or its last error) or a passing fault in the last few steps."""
        policy = self._settings.read_retry
        if max(u, ctx.error) >= policy.empty_error:
            return True
        last = self.recent_faults.get(tool)
        return last is not None and ctx.step - last <= policy.recent_steps
