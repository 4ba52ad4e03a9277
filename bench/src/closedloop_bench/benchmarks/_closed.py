"""The closed-loop strategies: ``closedloop.agent`` on the same tools, model and limits.

Two planners. ``react``: the model proposes every step (as in the baselines), so with
the same model the difference is the control alone. ``reference``: the domain's reference
agent (``closedloop_bench.reference.weather`` and the others: rules propose, the model is
asked only past their gate), as closedloop is meant to be used; the test model
cannot answer the rules' questions, so with it the rules run alone. ``auto`` takes
``reference`` for real models and ``react`` for the test model.

In ``react`` mode reads are sensed before the loop sees them: an HTTP-level failure or an
answer that lost its key fields (``partial``: schema drift) raises, so the executor
retries it with the PID-scheduled delay, within the same attempt budget as the baselines;
the last attempt's answer, whatever it is, goes to the model. Effects run as the
toolkit's action contracts (ledger keys, preconditions, reconcilers). ``closedloop_pid``
keeps the protocol at ``normal``; ``closedloop_adrc`` lets the ESO raise it. ``closedloop_acting`` and
``closedloop_ignoring`` are the budget row with the actions on the estimate
(:func:`acting_config`) on, or off with the same estimates kept.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from closedloop._exceptions import ActionError, ConfigurationError
from closedloop.agent import (
    Agent,
    ContextSettings,
    ControlConfig,
    EarlyHandover,
    HaltReason,
    HealthSettings,
    ModelSettings,
    ReadRetry,
    RunLimits,
    RunResult,
    Runtime,
    StormWait,
    Tool,
    TraceSink,
    as_tool,
    default_schedule,
    stop_on_no_progress,
    stop_on_repeats,
)
from closedloop.control import schedule_max_retries
from closedloop.decision import RuleGate
from closedloop.execution import AtomicAction, Condition
from closedloop.policy import (
    RetryPolicy,
    retry_async,
    retry_if_exception_type,
    stop_after_attempt,
    wait_fixed,
)

from ..reference import DOMAIN_TOOLS, Answer, WorldTools
from ._strategies import LABELS, Episode, Limits, Outcome

__all__ = [
    "FIXED_U",
    "PLANNERS",
    "READ_RETRY",
    "ClosedLoopAgent",
    "acting_config",
    "budget_config",
    "closed_loop_tools",
    "control_config",
    "fixed_config",
    "react_agent",
    "reference_builder",
    "reference_config",
]

Sleep = Callable[[float], Awaitable[None]]
AgentBuilder = Callable[[Episode, ControlConfig], Agent]
"""Builds the agent of one episode (a reference agent plugs in here)."""


async def _again(
    fn: Callable[..., Any], args: tuple[Any, ...], attempts: int, sleep: Sleep, delay_s: float
) -> Any:
    """``fn(*args)``, asked again while a read it needs fails (``ActionError``)."""

    async def attempt(_: int) -> Any:
        result = fn(*args)
        return await result if inspect.isawaitable(result) else result

    policy = RetryPolicy(
        stop_after_attempt(attempts), wait_fixed(delay_s), retry_if_exception_type(ActionError)
    )
    return (await retry_async(attempt, policy, sleep=sleep)).unwrap()


def _patient(action: AtomicAction, attempts: int, sleep: Sleep, delay_s: float) -> AtomicAction:
    """The action with preconditions and reconciler that re-ask a failed read.

    The contracts read the world (has this booking happened already?); a 5xx on that
    read is a failed measurement, not an answer, and one fault in ten must not sink the
    effect it guards. Same budget as every call.
    """

    def patient(condition: Condition) -> Condition:
        async def check(first: Any, second: Any) -> Any:
            return await _again(condition.check, (first, second), attempts, sleep, delay_s)

        return Condition(condition.name, check)

    reconciler = action.reconciler
    patient_reconciler = None
    if reconciler is not None:

        async def reconcile(args: Any, record: Any) -> Any:
            return await _again(reconciler, (args, record), attempts, sleep, delay_s)

        patient_reconciler = reconcile
    conditions = [patient(c) for c in action.preconditions if isinstance(c, Condition)]
    return dataclasses.replace(action, preconditions=conditions, reconciler=patient_reconciler)


def closed_loop_tools(
    tools: WorldTools,
    domain: str,
    attempts: int,
    *,
    sleep: Sleep = asyncio.sleep,
    delay_s: float = 0.1,
) -> list[Tool]:
    """The domain's tools for the loop: sensed reads, and effects as action contracts whose
    own reads are re-asked when they fail (``delay_s`` apart, ``sleep`` injectable)."""
    out: list[Tool] = []
    for name in DOMAIN_TOOLS[domain]:
        if name in tools.actions:
            action = _patient(tools.actions[name], attempts, sleep, delay_s)
            out.append(as_tool(action))
        else:
            # Reads go in as they are: the loop itself asks a read again when it answers
            # with a passing fault or lost key fields (``READ_RETRY``).
            out.append(as_tool(getattr(tools, name)))
    return out


READ_RETRY = ReadRetry(partial=True)
"""The loop's read retry in the benchmark: passing faults and drifted answers (``partial``)
are asked again within the shared attempt budget; a doubtful empty answer is re-checked."""

FIXED_U = 0.5
"""The control signal the controller-off strategy is frozen at: a mid, hand-tuned setting."""


def react_agent(
    episode: Episode,
    control: ControlConfig,
    *,
    tools: Any = None,
    trace: TraceSink | None = None,
    read_retry: ReadRetry = READ_RETRY,
) -> Agent:
    """The ReAct agent of one closed-loop episode: the episode's model, tools (or
    ``tools``), store, limits and trace (or ``trace``), under ``control``."""
    limits = episode.limits
    source = episode.tools if tools is None else tools
    sink = trace if trace is not None else episode.trace
    return Agent(
        episode.model,
        closed_loop_tools(source, episode.task.domain, limits.attempts, sleep=episode.sleep),
        mode="react",
        control=dataclasses.replace(control, read_retry=read_retry),
        limits=RunLimits(
            max_steps=limits.max_steps,
            deadline_s=limits.deadline_s,
            stop=stop_on_no_progress(limits.no_progress) | stop_on_repeats(2),
        ),
        model_settings=ModelSettings(
            max_tokens=limits.max_tokens,
            temperature=limits.temperature,
            seed=limits.seed,
            tool_calling="json",
        ),
        context=ContextSettings(observation_chars=limits.observation_chars),
        runtime=Runtime(
            sleep=episode.sleep, store=episode.store, trace=sink if sink is not None else False
        ),
    )


def fixed_config(config: ControlConfig, u: float = FIXED_U) -> ControlConfig:
    """``config`` with the controller taken out of the loop: every actuator schedule
    answers as if ``u`` were always ``u`` (same retry budget, no feedback)."""
    # ``held`` also reports u itself to every reader of the settings (the rigour line, the
    # re-check of empty answers, the observer's input), not the controller's live output.
    return dataclasses.replace(config, schedule=config.schedule.held(u))


def budget_config(config: ControlConfig, *, attempts: int) -> ControlConfig:
    """``config`` with the attempt budget handed to the controller: retries scheduled from
    u (none below 0.5, the whole budget from it), a circuit breaker and measured timeouts
    per tool (:class:`~closedloop.agent.HealthSettings`). The budget per call is the same
    ``attempts`` every strategy has; only where it is spent changes."""
    extra = attempts - 1
    schedule = dataclasses.replace(config.schedule, max_retries=schedule_max_retries(0.5, 0, extra))
    return dataclasses.replace(config, schedule=schedule, health=HealthSettings())


def acting_config(
    config: ControlConfig, read_retry: ReadRetry, *, act: bool
) -> tuple[ControlConfig, ReadRetry]:
    """The budget row's ``config`` and ``read_retry`` with the actions on the estimate on
    (``act``) or off, nothing else changed. On: a 429 with ``Retry-After`` is waited out
    without spending an attempt (:class:`~closedloop.agent.StormWait`), an open breaker
    refuses calls, and the task is handed over early when f_est or an open breaker says
    it cannot finish (:class:`~closedloop.agent.EarlyHandover`). Off: the same breakers,
    latencies and f_est are kept and recorded, and nothing is done with them."""
    health = config.health or HealthSettings()
    control = dataclasses.replace(
        config,
        health=dataclasses.replace(health, refuse_open=act),
        early_handover=EarlyHandover() if act else None,
    )
    return control, dataclasses.replace(read_retry, storm=StormWait() if act else None)


def control_config(*, adrc: bool, attempts: int) -> ControlConfig:
    """The loop's defaults, with the retry budget every strategy shares."""
    extra = attempts - 1
    schedule = dataclasses.replace(
        default_schedule(), max_retries=schedule_max_retries(0.5, extra, extra)
    )
    return ControlConfig(protocols=adrc, schedule=schedule)


PLANNERS = ("auto", "react", "reference")


def reference_builder(domain: str) -> Callable[..., Any] | None:
    """``closedloop_bench.reference.<domain>.build_<domain>_agent``, if that agent exists."""
    try:
        module = importlib.import_module(f"closedloop_bench.reference.{domain}")
    except ImportError:
        return None
    found = getattr(module, f"build_{domain}_agent", None)
    return found if callable(found) else None


def reference_config(*, adrc: bool, attempts: int) -> ControlConfig:
    """The reference agents' own control settings, with the shared retry budget."""
    try:
        from ..reference._agents_common import reference_control
    except ImportError:  # pragma: no cover - the reference agents are not installed
        return control_config(adrc=adrc, attempts=attempts)
    base: ControlConfig = reference_control(protocols=adrc)
    extra = attempts - 1
    schedule = dataclasses.replace(
        base.schedule, max_retries=schedule_max_retries(0.5, extra, extra)
    )
    return dataclasses.replace(base, schedule=schedule)


class ClosedLoopAgent:
    """closedloop's loop: PID per step type; ESO protocols if ``adrc``.

    ``planner`` is ``react``, ``reference`` or ``auto`` (see the module). ``builder``
    replaces the ReAct agent this class builds (``builder(episode, control)``). ``fixed``
    freezes every actuator at :data:`FIXED_U`; ``gate`` adds the confidence gate
    (:class:`~closedloop.decision.RuleGate`): a known cause's rule makes the next call
    itself when it is confident enough. ``acting``: None leaves the estimates as the
    budget row uses them; True or False applies :func:`acting_config` on top of it.
    """

    def __init__(
        self,
        *,
        adrc: bool,
        planner: str = "auto",
        builder: AgentBuilder | None = None,
        fixed: bool = False,
        gate: bool = False,
        budget: bool = False,
        acting: bool | None = None,
        name: str | None = None,
    ) -> None:
        if planner not in PLANNERS:
            raise ConfigurationError("planner", planner, f"must be one of {', '.join(PLANNERS)}")
        self.adrc = adrc
        self.planner = planner
        self.fixed = fixed
        self.gate = gate
        self.budget = budget
        self.acting = acting
        self.name = name or ("closedloop_adrc" if adrc else "closedloop_pid")
        if self.name not in LABELS:
            raise ConfigurationError("name", self.name, f"known: {', '.join(LABELS)}")
        self.label = LABELS[self.name]
        self.builder = builder

    def planner_for(self, episode: Episode) -> str:
        """The planner this episode gets (``auto`` resolved; ``react`` without an agent)."""
        wanted = self.planner
        if wanted == "auto":
            wanted = "react" if episode.test_model else "reference"
        if wanted == "reference" and reference_builder(episode.task.domain) is None:
            return "react"
        return wanted

    def settings(self, limits: Limits) -> tuple[ControlConfig, ReadRetry]:
        """The control configuration and read retry of an episode's agent under ``limits``."""
        control = control_config(adrc=self.adrc, attempts=limits.attempts)
        read_retry = READ_RETRY
        if self.budget:
            control = budget_config(control, attempts=limits.attempts)
        if self.fixed:
            control = fixed_config(control)
        if self.gate:
            control = dataclasses.replace(control, rule_gate=RuleGate())
        if self.acting is not None:
            control, read_retry = acting_config(control, read_retry, act=self.acting)
        return control, read_retry

    def agent(self, episode: Episode) -> Agent:
        """The agent of one episode."""
        control, read_retry = self.settings(episode.limits)
        if self.builder is not None:
            return self.builder(episode, control)
        return react_agent(episode, control, read_retry=read_retry)

    async def _reference(self, episode: Episode) -> RunResult:
        build = reference_builder(episode.task.domain)
        assert build is not None
        limits = episode.limits
        control = reference_config(adrc=self.adrc, attempts=limits.attempts)
        agent = build(
            None if episode.test_model else episode.model,
            base_url=episode.tools.base_url,
            control=fixed_config(control) if self.fixed else control,
            store=episode.store,
            deadline_s=limits.deadline_s,
            trace=episode.trace if episode.trace is not None else False,
            sleep=episode.sleep,
        )
        try:
            result: RunResult = await agent.run(episode.task)
        finally:
            await agent.aclose()
        return result

    async def run(self, episode: Episode) -> Outcome:
        """One episode through the loop; the run's halt reason is the outcome's."""
        planner = self.planner_for(episode)
        if planner == "reference":
            result = await self._reference(episode)
        else:
            result = await self.agent(episode).run(episode.task.agent_task())
        handed_over = result.halt_reason is HaltReason.HANDOVER
        return Outcome(
            answer=Answer.of(result),
            halt=result.halt_reason.value,
            steps=len(result.steps),
            handed_over=handed_over,
            protocols=tuple(s.protocol for s in result.steps),
            error=None if result.success or handed_over else result.message,
            run=result,
            planner=planner,
        )
