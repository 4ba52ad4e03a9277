"""Agent-based strategies: the ``closedloop.Agent`` loop on a task's own tools.

- ``closedloop``: the loop as a user gets it, the controller on (PID-scheduled actuators,
  the ESO's protocols);
- ``frozen``: the same loop with the controller taken out: every actuator schedule held
  at u = 0.5 (the faults benchmark's frozen row, :func:`fixed_config`) and the protocol
  held at ``normal``. It is a fixed setting, a point of the frontier;
- ``ladder``: the loop on a model ladder (``Agent(model=[weak, strong])``). It needs an
  ``Agent`` that accepts a list of models; until then naming it is a clear error;
- ``confident``, ``gated`` (and ``frozen_gated``): the loop with the confident call
  (``Sampling(stop="auto")``), or with the abstaining gate (:data:`GATE`).

What they share with the one-call baselines, so a comparison changes one thing: the
task's text (the rules and the user's words: :func:`agent_instructions` passed as the
agent's instructions, :func:`task_request` as the task; the functions, each once, in the
agent's own listing of its tools with their argument schemas), the same tools (the task's
OpenAI schemas, run by :class:`TaskTools`), the same token budget per model call and the
same checker. What still differs, honestly: the agent wraps that text in its own frame (a
line saying it proposes one action per reply, the task state and the latest observations)
and answers in its own reply format (``{"tool": ..., "arguments": ...}`` or
``{"final": ...}``, one call per reply) instead of the baselines' all-calls-at-once
``{"calls": [...]}``. That is what a loop is; everything else is held equal.

When a run ends. A loop asks its model again after every call, so a one-call task costs
the call, then a second reply to learn that the task is done. Small models make that
second reply the same call again (refused as a repeat), then a third, the final answer:
two of three model calls execute nothing. Two rules end that pattern, on every agent row
alike (``closedloop``, ``frozen``, ``ladder``), so they change no comparison between rows:

- *the task declares its completion*: a task of a one-call family (:data:`ONE_CALL_FAMILIES`:
  the request is one action by construction, as its author knows) is complete once one
  offered function has run and answered ok; the run ends with that answer
  (``ControlConfig.completion_predicate``). It reads neither the expected call nor the
  checker: a wrong call that ran ends the run too, and fails;
- *an exact repeat of the call that last ran and succeeded closes the run with that call's
  result* (``ControlConfig.end_on_repeat``): on every other family, a model that proposes
  the call it has just seen succeed has nothing left to do. The cost is on a task that asks
  for the same call twice, whose second call the repeat guard refused anyway.

``declare_completion=False, end_on_repeat=False`` gives the loop as it was, for comparison.
Each run keeps its step records, compacted (:func:`step_records`): the step's e and u, the
confidence sensors' reading, the actuators that were set, the call made and whether it ran;
:func:`idle_calls` counts the model calls of the steps that executed nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from closedloop import Runtime
from closedloop._exceptions import ConfigurationError, ToolError
from closedloop.agent import (
    ActionCall,
    Agent,
    ControlConfig,
    ModelSettings,
    RunLimits,
    Sampling,
    StepRecord,
    Tool,
    default_schedule,
)
from closedloop.control import ConfidenceStop, schedule_context
from closedloop.feedback import MemoryStore
from closedloop.models import FunctionModel, Model
from closedloop.perception import Observation, ObservationStatus

from ._format import ONE_CALL_FAMILIES, ToolTask
from ._prompt import agent_instructions, task_request
from ._strategies import DEFAULT_MAX_TOKENS, Attempt, TaskTools, register_strategy

__all__ = [
    "DEFAULT_MAX_STEPS",
    "FROZEN_U",
    "AgentStrategy",
    "agent_takes_ladder",
    "frozen_control",
    "idle_calls",
    "step_records",
    "task_agent_tools",
]

DEFAULT_MAX_STEPS = 8
"""Steps an agent may take on one task: the longest ideal answer (five calls), its final
answer and two steps to recover from a refused proposal."""

FROZEN_U = 0.5
"""The control signal the frozen row holds every actuator at (the faults benchmark's)."""


def _one_action_done(_call: ActionCall, observation: Observation) -> bool:
    return observation.status is ObservationStatus.OK


_SAME_EVERY_STEP = frozenset({"u", "tool_calling"})
"""Actuator entries a compact step leaves out: u is the step's own field, and the
tool-calling form is the strategy's, the same at every step."""


def step_records(steps: Sequence[StepRecord]) -> list[dict[str, Any]]:
    """The run's steps, compacted for the benchmark's results: index, step type, e, u,
    the confidence sensors' reading (the fields that had an input), the actuators that
    were set, the call made and whether it ran, the model calls the step took, a final
    answer and the halt."""
    out: list[dict[str, Any]] = []
    for record in steps:
        confidence = (
            None
            if record.confidence is None
            else {k: v for k, v in record.confidence.model_dump().items() if v is not None}
        )
        action = record.action
        out.append(
            {
                "step": record.step,
                "type": record.step_type,
                "e": round(record.error, 4),
                "u": round(record.control, 4),
                "confidence": confidence,
                "actuators": {
                    k: v
                    for k, v in record.model_dump(mode="json")["actuators"].items()
                    if k not in _SAME_EVERY_STEP
                },
                "call": None
                if action is None
                else {"name": action.tool, "arguments": dict(action.arguments)},
                "executed": action is not None and record.observation is not None,
                "model_calls": record.usage.model_calls,
                "final": record.final_answer is not None,
                "refused": [e[:160] for e in record.validation_errors],
                "halt": None if record.halt is None else record.halt.value,
            }
        )
    return out


def idle_calls(steps: Sequence[Mapping[str, Any]]) -> int:
    """The model calls that executed nothing: every call of a step that ran no tool (a
    refused proposal, a refused repeat, a final answer with no call), and in a step that
    ran one the replies refused and re-asked before it. A vote's samples are one
    proposal, not idle calls. On a one-call task the ideal is none."""
    total = 0
    for step in steps:
        if step["executed"]:
            total += int(step["actuators"].get("reasks", 0))
        else:
            total += int(step["model_calls"])
    return total


def frozen_control(u: float = FROZEN_U) -> ControlConfig:
    """The loop's control with the controller out: every actuator schedule answers as if
    the control signal were always ``u``, and the protocol stays ``normal`` (no ESO)."""
    from closedloop_bench.benchmarks._closed import fixed_config

    return fixed_config(ControlConfig(protocols=False, schedule=default_schedule()), u)


def task_agent_tools(task: ToolTask, tools: TaskTools) -> list[Tool]:
    """The task's functions as agent tools, built from their OpenAI schemas; each runs
    through ``tools`` (a failed call is an error the model sees, not a crash)."""

    def executor(name: str) -> Callable[..., Any]:
        def run(**arguments: Any) -> Any:
            result = tools.call(name, arguments)
            if not result.ok:
                raise ToolError(result.error or f"{name} failed")
            return result.value

        return run

    return [
        Tool.from_openai(schema, executor(schema["function"]["name"]))
        for schema in task.tool_dicts()
    ]


def agent_takes_ladder() -> bool:
    """Whether ``closedloop.Agent`` accepts an ordered list of models (a ladder)."""
    probe = FunctionModel(lambda _messages, _call: '{"final": ""}', name="probe")
    try:
        Agent([probe, probe], runtime=Runtime(trace=False))
    except (ConfigurationError, TypeError):
        return False
    return True


RunsOn = Literal["each", "strongest", "ladder"]


@dataclass(frozen=True, slots=True)
class AgentStrategy:
    """One task through ``closedloop.Agent`` (see the module docstring).

    ``frozen`` takes the controller out (:func:`frozen_control`); ``reduce`` turns on
    context reduction (:func:`~closedloop.control.schedule_context`: at high u the model
    sees the most relevant half of the tools and of the recent observations). ``runs_on="ladder"``
    hands the runner's models, weakest first, straight to ``Agent(model=[...])``. Each
    model keeps one store across the tasks of a run, as an agent reused by a user would:
    the controllers' history carries from task to task. ``declare_completion`` and
    ``end_on_repeat``: how a run ends (the module docstring); both off is the loop as it was.
    ``sampling`` replaces the loop's :class:`~closedloop.agent.Sampling` (the
    confidence-gated actuators), the same with the controller on or frozen.
    """

    name: str = "closedloop"
    frozen: bool = False
    fixed: bool = False
    reduce: bool = False
    declare_completion: bool = True
    end_on_repeat: bool = True
    runs_on: RunsOn = "each"
    sampling: Sampling | None = None
    max_steps: int = DEFAULT_MAX_STEPS
    max_tokens: int = DEFAULT_MAX_TOKENS
    deadline_s: float = 300.0
    clock: Callable[[], float] = time.perf_counter
    _stores: dict[str, MemoryStore] = field(default_factory=dict, repr=False, compare=False)

    def control(self, task: ToolTask | None = None) -> ControlConfig:
        """The loop's control for ``task`` (how a run ends: the module docstring)."""
        if self.frozen:
            config = frozen_control()
        elif self.reduce:
            schedule = replace(default_schedule(), context=schedule_context())
            config = ControlConfig(schedule=schedule)
        else:
            config = ControlConfig()
        if self.sampling is not None:
            config = replace(config, sampling=self.sampling)
        one_action = (
            self.declare_completion and task is not None and task.family in ONE_CALL_FAMILIES
        )
        return replace(
            config,
            end_on_repeat=self.end_on_repeat,
            completion_predicate=_one_action_done if one_action else None,
        )

    def agent(self, task: ToolTask, tools: TaskTools, model: Model | Sequence[Model]) -> Agent:
        """The agent of one task: the shared text as instructions, the task's tools."""
        key = model.name if isinstance(model, Model) else "|".join(m.name for m in model)
        return Agent(
            model,
            task_agent_tools(task, tools),
            instructions=agent_instructions(task),
            model_settings=ModelSettings(
                max_tokens=self.max_tokens, temperature=0.0, tool_calling="json"
            ),
            limits=RunLimits(max_steps=self.max_steps, deadline_s=self.deadline_s),
            control=self.control(task),
            runtime=Runtime(store=self._stores.setdefault(key, MemoryStore()), trace=False),
        )

    async def solve(self, task: ToolTask, model: Model) -> Attempt:
        return await self.solve_on(task, model)

    async def solve_ladder(self, task: ToolTask, models: Sequence[Model]) -> Attempt:
        return await self.solve_on(task, list(models))

    async def solve_on(self, task: ToolTask, model: Model | Sequence[Model]) -> Attempt:
        started = self.clock()
        tools = TaskTools(task)
        result = await self.agent(task, tools, model).run(task_request(task))
        answer = result.answer
        usage = result.usage
        steps = step_records(result.steps)
        return Attempt(
            calls=tuple(tools.calls),
            final_text="" if answer is None else str(answer),
            model_calls=usage.model_calls,
            tokens_in=usage.prompt_tokens,
            tokens_out=usage.completion_tokens,
            wall_s=max(0.0, self.clock() - started),
            error=None if result.success else (result.message or result.halt_reason.value),
            env_state=tools.state(),
            extra={
                "halt": result.halt_reason.value,
                "steps": steps,
                "idle_calls": idle_calls(steps),
            },
        )


def _ladder() -> AgentStrategy:
    if not agent_takes_ladder():
        raise ConfigurationError(
            "strategy",
            "ladder",
            "needs the model ladder: this closedloop's Agent takes one model, "
            "not an ordered list of them",
        )
    return AgentStrategy(name="ladder", runs_on="ladder")


register_strategy("closedloop", AgentStrategy)
register_strategy("frozen", lambda: AgentStrategy(name="frozen", frozen=True, fixed=True))
CONFIDENT = Sampling(stop="auto")
"""The confident call: a first sample whose confidence reads 0.5 or more runs alone, else
a weighted vote of up to three (with logprobs; without, the loop's scheduled votes)."""
register_strategy("confident", lambda: AgentStrategy(name="confident", sampling=CONFIDENT))
GATE = Sampling(stop=ConfidenceStop(threshold=0.5, max_samples=3), abstain_below=0.4)
"""The confidence gate with the settings the development bank picks for Qwen: the first
sample runs at confidence 0.5 or more, else a confidence-weighted vote of three; below 0.4
before any tool ran, the run abstains."""
register_strategy("gated", lambda: AgentStrategy(name="gated", sampling=GATE))
register_strategy(
    "frozen_gated",
    lambda: AgentStrategy(name="frozen_gated", frozen=True, fixed=True, sampling=GATE),
)
register_strategy("ladder", _ladder)
register_strategy("reduced", lambda: AgentStrategy(name="reduced", reduce=True))
