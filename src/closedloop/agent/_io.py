"""Model calls and tool calls of one step, and what their answers do to the state.

Each call is raced against the run's watchers (deadline, budget, cancellation), so it
ends when the run must, not when the call returns.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._exceptions import (
    ModelAuthError,
    ModelError,
    ModelLoadError,
    ModelNotAvailableError,
    RealModelCallBlockedError,
    SchemaCompileError,
    ToolError,
)
from ..control import ActuatorSettings, Protocol
from ..execution import (
    PROGRAMMING_ERRORS,
    ActionOutcome,
    EffectClass,
    OutcomeStatus,
    RetryIfException,
    RetryPolicy,
    StopAfterAttempt,
    WaitFixed,
)
from ..models import Completion, Model, ModelRequest
from ..perception import Observation, ObservationStatus
from ._actions import Proposal, final_tool_schema, parse_proposal
from ._inflight import race
from ._loop import Run
from ._projection import project
from ._protocols import agree
from ._records import ActionCall, HaltReason, RunUsageSummary
from ._state import ObservationEntry, resolve_path
from ._tools import Tool, to_observation

__all__ = [
    "FATAL_MODEL_ERRORS",
    "ModelReply",
    "absorb",
    "call_model",
    "charge",
    "execute",
    "outcome_observation",
    "propose",
]

FATAL_MODEL_ERRORS: tuple[type[BaseException], ...] = (
    ModelNotAvailableError,
    ModelLoadError,
    ModelAuthError,
    RealModelCallBlockedError,
)
"""Model errors no further step can cure: the run ends with ``error`` and they propagate."""


@dataclass(frozen=True, slots=True)
class ModelReply:
    """One proposal round: what was proposed, at what cost, or why the run must halt."""

    proposal: Proposal
    usage: RunUsageSummary
    settings: ActuatorSettings
    u: float
    halt: HaltReason | None = None
    strict: bool = False


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=repr)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _dump(observation: Observation, max_chars: int) -> dict[str, Any]:
    small = observation.compacted(max_chars).model_copy(update={"raw": None})
    try:
        return small.model_dump(mode="json")
    except (TypeError, ValueError):  # a value pydantic cannot serialise: keep its text
        return small.model_copy(update={"value": repr(small.value)}).model_dump(mode="json")


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


# --- the model -----------------------------------------------------------------------


def charge(run: Run, completion: Completion, usage: dict[str, float]) -> None:
    tokens = completion.usage.total_tokens
    cost = completion.cost_usd or 0.0
    b = run.state.budget
    b.tokens_used += tokens
    b.cost_used += cost
    b.model_calls += 1
    usage["model_calls"] += 1
    usage["prompt_tokens"] += completion.usage.prompt_tokens
    usage["completion_tokens"] += completion.usage.completion_tokens
    usage["cost"] += cost
    if run.budget is not None:
        run.budget.charge(tokens, cost)
        b.tokens_left, b.cost_left = run.budget.tokens_left, run.budget.cost_left


async def call_model(
    run: Run,
    model: Model,
    messages: Sequence[Mapping[str, str]],
    usage: dict[str, float],
    *,
    schema: Mapping[str, Any] | None,
    tools: Sequence[Mapping[str, Any]] | None,
    seed: int,
    temperature: float,
    max_tokens: int | None = None,
) -> tuple[Completion | None, HaltReason | None, str | None]:
    """One model call raced against the watchers: ``(completion, halt, failure note)``."""
    limit = max_tokens or run.settings.max_tokens
    if run.budget is not None and run.budget.tokens_left is not None:
        limit = max(1, min(limit, run.budget.tokens_left))
    remaining = run.deadline_s - run.elapsed()
    call = model.complete(
        [dict(m) for m in messages],
        ModelRequest(
            response_schema=schema if run.grammar_ok else None,
            max_tokens=limit,
            temperature=temperature,
            seed=seed,
            timeout=remaining if remaining > 0 else None,
            tools=tuple(tools or ()),
        ),
    )
    try:
        completion, halt = await race(call, run.watchers())
    except SchemaCompileError as exc:
        run.grammar_ok = False  # decode loosely from now on; the validator still checks
        run.state.failures.append(f"constrained decoding unavailable: {exc}")
        return await call_model(
            run,
            model,
            messages,
            usage,
            schema=None,
            tools=tools,
            seed=seed,
            temperature=temperature,
            max_tokens=max_tokens,
        )
    except FATAL_MODEL_ERRORS:
        raise
    except ModelError as exc:
        return None, None, f"the model call failed ({type(exc).__name__}: {exc})"
    if completion is not None:
        charge(run, completion, usage)
    return completion, halt, None


async def propose(
    run: Run,
    kinds: frozenset[str],
    *,
    schema: Callable[[bool], Mapping[str, Any]],
    visible: Sequence[Tool],
    key: str,
    notes: Sequence[str] = (),
) -> ModelReply:
    """Project the state, ask the model (twice under dual verification), parse the answer."""
    cfg = run.settings
    u = await run.bank.output(key)
    settings = cfg.control.schedule(u)
    strict = settings.strictness.value == "strict" and not cfg.native and run.grammar_ok
    protocol = run.control.protocol
    messages = project(
        run.state,
        tools=visible,
        required=run.task.required_fields,
        kinds=kinds,
        native=cfg.native,
        settings=settings,
        rigour=cfg.control.rigour_prompt,
        max_steps=cfg.max_steps,
        protocol=protocol.value,
        options=cfg.projection,
        extra_notes=notes,
    )
    run.state.notes = []
    native_tools = None
    if cfg.native and ("tool" in kinds or "final" in kinds):
        native_tools = [t.openai_schema() for t in visible if "tool" in kinds]
        if "final" in kinds:
            native_tools.append(final_tool_schema(run.task.required_fields))
    usage = {"model_calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "cost": 0.0}
    response_schema = schema(True) if strict else None
    seed = cfg.seed + run.state.step
    results: list[tuple[Completion | None, HaltReason | None, str | None]]
    if protocol is Protocol.DUAL_VERIFICATION:
        second_model = cfg.verifier or cfg.model
        results = list(
            await asyncio.gather(
                call_model(
                    run,
                    cfg.model,
                    messages,
                    usage,
                    schema=response_schema,
                    tools=native_tools,
                    seed=seed,
                    temperature=cfg.temperature,
                ),
                call_model(
                    run,
                    second_model,
                    messages,
                    usage,
                    schema=response_schema,
                    tools=native_tools,
                    seed=seed + 7919,
                    temperature=cfg.dual_temperature,
                ),
            )
        )
    else:
        results = [
            await call_model(
                run,
                cfg.model,
                messages,
                usage,
                schema=response_schema,
                tools=native_tools,
                seed=seed,
                temperature=cfg.temperature,
            )
        ]
    summary = RunUsageSummary(
        model_calls=int(usage["model_calls"]),
        prompt_tokens=int(usage["prompt_tokens"]),
        completion_tokens=int(usage["completion_tokens"]),
        cost=usage["cost"],
    )
    halts = [h for _, h, _ in results if h is not None]
    if halts:
        return ModelReply(Proposal("invalid"), summary, settings, u, halts[0], strict)
    failures = [f for _, _, f in results if f is not None]
    if failures:
        return ModelReply(Proposal("invalid", errors=tuple(failures)), summary, settings, u)
    proposals = [parse_proposal(c, native=cfg.native) for c, _, _ in results if c is not None]
    proposal = proposals[0]
    if len(proposals) == 2:
        proposal, note = agree(proposals[0], proposals[1])
        proposal = Proposal(
            proposal.kind,
            proposal.call,
            proposal.answer,
            proposal.fields,
            proposal.plan,
            proposal.errors,
            (*proposal.notes, note) if note not in proposal.notes else proposal.notes,
        )
    return ModelReply(proposal, summary, settings, u, None, strict)


# --- tools ------------------------------------------------------------------------------


async def execute(
    run: Run, tool: Tool, call: ActionCall
) -> tuple[Observation | None, ActionOutcome | None, HaltReason | None, ActuatorSettings, float]:
    """Run a validated call through the executor with the tool's actuator settings.

    A read (``recomputable``) whose answer is a passing fault is asked again here, within
    the same ``max_retries`` the executor has for exceptions (see ``_reads.py``); each
    retry goes into ``run.step_retries`` for the step's record.
    """
    u = await run.bank.output(tool.name)
    settings = run.settings.control.schedule(u)
    action = tool.action
    if not tool.fixed_timeout:
        action = action.with_timeout(max(0.001, settings.timeout_ms / 1000.0))
    policy = run.settings.read_retry
    read = tool.effect is EffectClass.RECOMPUTABLE
    budget = 1 + int(settings.max_retries)
    used = 0
    rechecked = False
    run.step_retries = []
    confirmation = run.confirmation
    run.confirmation = None  # a human's approval covers the one frozen action only
    while True:
        retry = RetryPolicy(
            StopAfterAttempt(max(1, budget - used)),
            WaitFixed(max(0.0, settings.retry_delay_ms / 1000.0)),
            RetryIfException(exclude=(*PROGRAMMING_ERRORS, ToolError)),
        )
        outcome, halt = await race(
            run.executor.execute(
                action,
                call.arguments,
                task_id=run.state.task_id,
                step=run.state.step,
                confirmation=confirmation,
                retry=retry,
                state=run.state.condition_view(),
            ),
            run.watchers(),
        )
        if outcome is None:
            return None, None, halt, settings, u
        used += max(1, outcome.attempts)
        observation = outcome_observation(outcome, tool.name, run.settings.wall_clock())
        if not (read and outcome.ok):
            break
        why = ""
        if policy.should_retry(observation) and used < budget:
            why = "passing fault"
        elif (
            observation.status is ObservationStatus.EMPTY
            and policy.enabled
            and policy.recheck_empty
            and not rechecked
            and _doubtful(run, tool.name, u)
        ):
            why = "empty answer re-checked (the tool's error is high or it failed recently)"
            rechecked = True
        if not why:
            break
        delay = policy.delay_s(observation, settings.retry_delay_ms) if used < budget else 0.0
        if why == "passing fault":
            run.recent_faults[tool.name] = run.state.step
        run.step_retries.append(
            {
                "attempt": len(run.step_retries) + 1,
                "status": observation.status.value,
                "error": observation.error,
                "delay_s": delay,
                "reason": why,
            }
        )
        if run.elapsed() + delay >= run.deadline_s:
            run.step_retries.pop()
            break  # the answer in hand is the last this step can have
        if delay > 0:
            # Cancellation and the budget may cut the wait; the deadline was checked above.
            watchers: dict[HaltReason, Callable[[], Any]] = {
                k: w for k, w in run.watchers().items() if k is not HaltReason.DEADLINE
            }
            _, halt = await race(run.settings.sleep(delay), watchers)
            if halt is not None:
                return None, None, halt, settings, u
    if read and policy.should_retry(observation):
        run.recent_faults[tool.name] = run.state.step
    not_run = (OutcomeStatus.PRECONDITION_FAILED, OutcomeStatus.CONFIRMATION_REQUIRED)
    key = outcome.effect_key
    if key and outcome.status not in not_run and key not in run.state.effect_keys:
        run.state.effect_keys.append(key)
    return observation, outcome, None, settings, u


def _doubtful(run: Run, tool: str, u: float) -> bool:
    """Whether an empty answer of ``tool`` might be a fault's: a high error signal (the
    tool's control output or its last error) or a passing fault in the last few steps."""
    policy = run.settings.read_retry
    if max(u, run.last_errors.get(tool, 0.0)) >= policy.empty_error:
        return True
    last = run.recent_faults.get(tool)
    return last is not None and run.state.step - last <= policy.recent_steps


def absorb(
    run: Run, tool: Tool, call: ActionCall, observation: Observation
) -> tuple[dict[str, Any], bool]:
    """Put an observation into the state: the entry, filled fields, progress."""
    state = run.state
    dumped = _dump(observation, run.settings.observation_chars)
    progress = False
    if observation.status in (
        ObservationStatus.OK,
        ObservationStatus.PARTIAL,
        ObservationStatus.STALE,
    ):
        digest = _digest([tool.name, observation.value])
        if digest not in state.seen_values:
            state.seen_values.append(digest)
            del state.seen_values[:-64]
            progress = True
    if observation.status is ObservationStatus.OK and tool.fills:
        before = run.complete_count()
        sources = {f.name: f.source for f in run.task.required_fields}
        for name, path in tool.fills.items():
            if sources.get(name) not in (None, tool.name):
                continue  # the field is reserved for another tool's answers
            found, value = resolve_path(observation.value, path)
            if found and value is not None:
                state.required_fields[name] = value
        run.refresh_fields()
        progress = progress or run.complete_count() > before
    state.observations.append(
        ObservationEntry(
            step=state.step,
            tool=tool.name,
            arguments=dict(call.arguments),
            observation=dumped,
            progress=progress,
        )
    )
    overflow = len(state.observations) - run.settings.keep_observations
    if overflow > 0:
        del state.observations[:overflow]
        state.dropped_observations += overflow
    if not observation.usable or observation.status is ObservationStatus.EMPTY:
        state.failures.append(
            f"step {state.step}: {tool.name} -> {observation.status}: {observation.meaning}"
        )
    return dumped, progress
