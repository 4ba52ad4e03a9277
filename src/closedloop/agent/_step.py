"""One step of the loop, top to bottom.

A :class:`Step` is made from the run (what persists across steps) and the
:class:`~closedloop.agent._actuators.Actuators` the previous step handed on. Its stages
run in the order of the loop, each taking what the one before returned::

    project  ─► messages                 the task state as the model's context
    propose  ─► ModelReply               a Proposal, its usage, the proposing key's settings
    validate ─► [reasons]                schema, phase, dependencies; refused: nothing runs
    act      ─► ToolRun | final          the tool through ToolPort (its own settings), or
                                         the final answer under the completion predicate
    observe  ─► (entry, progress)        the observation into the task state
    measure  ─► e ∈ [0, 1]               the step type's error metric, the loop's e(t)
                └──► Outcome             everything the acting stages concluded
    control  ─► Controlled               PID update(s) (Åström & Hägglund) → u →
                                         ActuatorSettings for the next step; an extended
                                         state observer (Han 2009, Gao 2003) → f_est →
                                         protocol; a Lyapunov monitor on task quality
    halt     ─► HaltReason | None        the outcome's own, else the run's stop checks
    record   ─► StepRecord               then ``Run.fold`` saves or ends the run

Where u goes. ``control`` feeds the error to the PID of the outcome's key (the key
scheme is in ``_actuators.py``: ``propose:<role>``, ``plan``, the tool's name,
``final``); the update returns the key's next :class:`~closedloop.control.ActuatorSettings`
inside a new ``Actuators`` value, which ``Run.fold`` keeps and the next step starts
from. There ``propose`` reads the proposing key's settings (strict decoding, the rigour
prompt) and ``act`` the tool's (timeout, retry delay, attempts). A step whose proposal
got as far as an action (a tool that ran, a final answer judged) feeds two keys: the
proposing key with the proposal's error (0, or 1 for a final answer refused as
incomplete), then the acting key with the action's. A proposal refused before anything
ran (schema, phase, a repeat) feeds its proposing key alone. A step that measured
nothing (a call cut off, a freeze for a human) leaves every controller as it was.

The strictness ladder. ``propose`` runs on one rung of loose → re-ask → grammar: the
proposing key's scheduled rung, raised before the key's first measurement in the run to
the prior (``ControlConfig.strictness_prior``, or the grammar for a model whose recent
loose replies were mostly refused). On the re-ask rung a reply the validator refuses goes
back to the model within the step with the validator's error text; on the grammar rung the
reply decodes under the tight action schema, whose answer branch opens only once the task's
completion predicate can hold (:meth:`Step.answer_open`). ``record`` keeps the rung used
(``strictness_used``) and the re-asks. When a tool's observation completes the task (every
required field filled, or the configured predicate), ``act`` ends the run with an answer
built from it instead of asking the model again.

The model and the tools are reached only through ``Run.model_io`` and ``Run.tool_io``
(``_io.py``). The modes (``_modes.py``) arrange these stages: ReAct proposes and acts
every step; plan-and-execute proposes a plan and acts it out; planner / executor /
reviewer adds a judge after the observation.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypedDict

from ..control import ActuatorSettings, LyapunovVerdict, Protocol, Strictness
from ..execution import OutcomeStatus
from ..models import Confidence
from ..perception import Observation, ObservationStatus
from ._actions import Proposal, final_tool_schema, parse_proposal
from ._actuators import FINAL, Actuators, ControlUpdate, act_key
from ._early import early_handover
from ._handover import freeze
from ._inflight import race
from ._observe import absorb
from ._projection import project, summarise_observation
from ._protocols import proposal_confidence, vote
from ._records import ActionCall, HaltReason, RunUsageSummary, StepRecord
from ._relevance import relevant_tools, shown_count
from ._repeats import action_signature, count_repeats, repeated_success
from ._run import Run
from ._state import field_problems
from ._tools import Tool

__all__ = [
    "NO_USAGE",
    "Controlled",
    "Judge",
    "ModelReply",
    "Outcome",
    "Step",
    "add_usage",
    "reask_messages",
]

Judge = Callable[
    [ActionCall | None, Observation | None], Awaitable[tuple[list[str], HaltReason | None]]
]
"""Plan modes decide what a step's outcome means for the plan (advance, send back, replan)."""
NO_USAGE = RunUsageSummary()
Schema = Callable[[bool], Mapping[str, Any]]


@dataclass(frozen=True, slots=True)
class ModelReply:
    """What the propose stage returns: the proposal, its cost, the proposing key's
    settings it was made under, or why the run must halt."""

    proposal: Proposal
    usage: RunUsageSummary
    settings: ActuatorSettings
    halt: HaltReason | None = None
    strict: bool = False
    level: str = "loose"
    reasks: int = 0
    disagreement: float = 0.0  # the share of voted samples outside the majority
    confidence: Confidence | None = None  # the sensors' reading before the call ran
    ruled_by: str | None = None  # the rule that proposed this call past the gate, if any
    timeout_factor: float = 1.0  # a rule's widening of the acting tool's timeout
    retry_cap: int | None = None  # a rule's call keeps to the attempts the read had left

    @property
    def u(self) -> float:
        return self.settings.u


def add_usage(a: RunUsageSummary, b: RunUsageSummary) -> RunUsageSummary:
    """Two calls' usage as one step's."""
    return RunUsageSummary(
        model_calls=a.model_calls + b.model_calls,
        prompt_tokens=a.prompt_tokens + b.prompt_tokens,
        completion_tokens=a.completion_tokens + b.completion_tokens,
        cost=a.cost + b.cost,
    )


def reask_messages(text: str, errors: Sequence[str]) -> list[dict[str, str]]:
    """The re-ask rung: the refused reply and the validator's reasons, sent back within the
    same step. It asks for a corrected reply, never for a way out of the task."""
    return [
        {"role": "assistant", "content": text[:2000]},
        {
            "role": "user",
            "content": (
                "That reply was refused: "
                + "; ".join(errors)
                + ". Reply again with exactly one JSON object in the format above, with "
                "this fixed."
            ),
        },
    ]


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """What the acting stages concluded; ``control``, ``halt`` and ``record`` read only this.

    ``step_type`` is the acting key and ``error`` its measured error. ``proposal_error``,
    when set, is fed first to ``proposing_key``. ``settings`` are the ones the action ran
    under (the tool's), or None for the proposal's. ``measured=False``: nothing was
    measured, the controllers hold.
    """

    reply: ModelReply
    proposing_key: str
    step_type: str
    phase: str
    error: float = 0.0
    measured: bool = True
    proposal_error: float | None = None
    settings: ActuatorSettings | None = None
    action: ActionCall | None = None
    final_answer: str | None = None
    validation_errors: Sequence[str] = ()
    observation: dict[str, Any] | None = None
    notes: Sequence[str] = ()
    progress: bool = False
    halt: HaltReason | None = None
    retries: Sequence[Mapping[str, Any]] = field(default_factory=tuple)


@dataclass(frozen=True, slots=True)
class Controlled:
    """What the control stage concluded: the acting key's update (its ``actuators`` are
    the next step's), and the task-level reading (step quality, f_est, protocol, V)."""

    update: ControlUpdate
    error: float
    quality: float
    f_est: float
    protocol: Protocol
    lyapunov: LyapunovVerdict | None


class Bounds(TypedDict):
    """The strict grammar's string bounds, as keyword arguments of ``action_schema``."""

    max_answer_chars: int
    max_string_chars: int


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


class Step:
    """One step over ``run``, starting from the ``actuators`` the last step handed on."""

    def __init__(self, run: Run, actuators: Actuators) -> None:
        self.run = run
        self.actuators = actuators
        self.gate_note: str | None = None  # why the rule gate left this step to the model
        self._shown: list[Tool] | None = None  # the tools this step shows, once chosen

    async def settings(self, key: str) -> ActuatorSettings:
        """The settings ``key`` acts on in this step."""
        return await self.run.controllers.settings(self.actuators, key)

    def visible_tools(self) -> list[Tool]:
        """The tools the model is shown: under dimension reduction, the core ones only."""
        tools = list(self.run.settings.tools.values())
        if self.run.control.protocol is Protocol.DIMENSION_REDUCTION:
            return [t for t in tools if t.core]
        return tools

    async def shown_tools(self, key: str) -> list[Tool]:
        """The tools this step's proposal is shown: the visible ones, cut to the share of
        the context ``key``'s settings allow (the most relevant to the task, and those the
        run has called, first). One choice per step: the prompt and the grammar agree."""
        if self._shown is None:
            visible = self.visible_tools()
            share = (await self.settings(key)).context
            if share < 1.0:
                state = self.run.state
                used = [e.tool for e in state.observations]
                visible = relevant_tools(visible, share, state.prompt, used)
            self._shown = visible
        return self._shown

    # --- project, propose ----------------------------------------------------------------

    def project(
        self,
        kinds: frozenset[str],
        visible: Sequence[Tool],
        settings: ActuatorSettings,
        notes: Sequence[str],
    ) -> list[dict[str, str]]:
        """The task state as this step's messages; the notes for the model are used up."""
        run, cfg = self.run, self.run.settings
        options = cfg.projection
        if settings.context < 1.0:  # a lost model sees fewer of the recent observations
            options = replace(
                options, observations=shown_count(options.observations, settings.context)
            )
        messages = project(
            run.state,
            tools=visible,
            required=run.task.required_fields,
            kinds=kinds,
            native=cfg.native,
            settings=settings,
            rigour=cfg.control.rigour_prompt,
            max_steps=cfg.max_steps,
            protocol=run.control.protocol.value,
            options=options,
            extra_notes=notes,
        )
        run.state.notes = []
        return messages

    async def propose(
        self, kinds: frozenset[str], schema: Schema, key: str, notes: tuple[str, ...] = ()
    ) -> ModelReply:
        """This step's proposal: the frozen action after a resume, else the model's (two
        samples that must agree under dual verification)."""
        run, cfg = self.run, self.run.settings
        settings = await self.settings(key)
        pending = run.state.pending
        if pending is not None:  # the frozen action, as a human decided it
            run.state.pending = None
            decided_note = ("the action frozen for a human decision, as decided",)
            if pending.kind == "tool" and pending.tool is not None:
                call = ActionCall(tool=pending.tool, arguments=pending.arguments)
                decided = Proposal("tool", call=call, notes=decided_note)
            else:
                decided = Proposal(
                    "final", answer=pending.answer, fields=pending.fields, notes=decided_note
                )
            return ModelReply(decided, NO_USAGE, settings)
        ruled = await self.rule_step(kinds, settings)
        if ruled is not None:
            return ruled
        visible = await self.shown_tools(key)
        models = run.model_io
        level = await self.strictness(key, settings)
        strict = level is Strictness.STRICT and not cfg.native and models.grammar_ok
        if strict and "tool" in kinds and visible and not self.answer_open():
            kinds = kinds - {"final"}  # the prompt offers what the grammar offers
        messages = self.project(kinds, visible, settings, notes)
        native_tools = None
        if cfg.native and ("tool" in kinds or "final" in kinds):
            native_tools = [t.openai_schema() for t in visible if "tool" in kinds]
            if "final" in kinds:
                native_tools.append(final_tool_schema(run.task.required_fields))
        schema_now = schema(True) if strict else None
        reply, text = await self.sample(messages, schema_now, native_tools, settings, strict)
        used = level if strict or level is not Strictness.STRICT else Strictness.REASK
        reasks = 0
        if used is Strictness.REASK:  # under the grammar, a refusal goes to the next step
            while reasks < cfg.control.max_reasks and reply.halt is None:
                errors = self.reply_errors(reply)
                if not errors:
                    break
                reasks += 1
                messages = [*messages, *reask_messages(text, errors)]
                again, text = await self.sample(
                    messages, schema_now, native_tools, settings, strict
                )
                reply = replace(again, usage=add_usage(reply.usage, again.usage))
        reply = replace(reply, level=used.value, reasks=reasks)
        if (
            used is Strictness.LOOSE
            and not cfg.native
            and reply.halt in (None, HaltReason.DEADLINE)
        ):
            # What this model does with no help: the warm start of its next run's rung. A
            # loose reply still running at the deadline is one the model could not give.
            refused = 1.0 if reply.halt is not None or self.reply_errors(reply) else 0.0
            await run.controllers.note_loose(cfg.model.name, refused)
        return reply

    async def rule_step(
        self, kinds: frozenset[str], settings: ActuatorSettings
    ) -> ModelReply | None:
        """Rules first: the last failed read made again by its rule, with no model call,
        when the rule's confidence clears the gate at that tool's recent error."""
        run = self.run
        gate = run.settings.control.rule_gate
        advice, run.advice = run.advice, None
        if gate is None or advice is None or "tool" not in kinds:
            return None
        decision, call = advice.decision, advice.call
        tool = run.settings.tools.get(call.tool)
        if tool is None or decision.action not in gate.actions:
            return None
        if not run.tool_io.may_repeat(tool, action_signature(call.tool, call.arguments)):
            return None  # the repeat budget after a fault is spent: the model decides
        key = act_key(tool.name)
        # The rule's call is an attempt of the same read, not a fresh budget: it runs only
        # while the most attempts the schedule ever gives a call are not used up.
        last = run.records[-1] if run.records else None
        used = 1 + len(last.retries) if last is not None and last.action == call else 1
        left = 1 + run.settings.control.schedule.max_retries(1.0) - used
        if left < 1:
            return None
        # The error before this failure: a lone fault after calm steps (or none) meets a
        # low gate; a fault that persists has raised it by the time it fails again.
        errors = [r.error for r in run.records if r.step_type == key][-gate.window - 1 : -1]
        recent = sum(errors) / len(errors) if errors else 0.0
        threshold = gate.threshold(recent)
        head = f"rule {decision.rule} -> {decision.action} (confidence {decision.confidence:.2f}"
        if decision.confidence < threshold:
            self.gate_note = (
                f"{head} < gate {threshold:.2f} at recent error {recent:.2f}): the model decides"
            )
            return None
        wait, factor = 0.0, 1.0
        if decision.action == "back_off":
            wait = float(decision.params.get("delay_s", 0.0))
        elif decision.action == "retry_later":
            wait = (await self.settings(key)).retry_delay_ms / 1000.0
        elif decision.action == "widen_timeout":
            factor = float(decision.params.get("factor", 1.0))
        wait = min(max(0.0, wait), gate.max_wait_s, max(0.0, run.deadline_s - run.elapsed()))
        if wait > 0:
            # Cancellation and the budget may cut the wait; the deadline already bounds it.
            watchers: dict[HaltReason, Callable[[], Any]] = {
                k: w for k, w in run.watchers().items() if k is not HaltReason.DEADLINE
            }
            _, cut = await race(run.settings.sleep(wait), watchers)
            if cut is not None:
                return ModelReply(Proposal("tool", call=call), NO_USAGE, settings, halt=cut)
        note = (
            f"{head} >= gate {threshold:.2f} at recent error {recent:.2f}): {call.tool} is "
            "called again without asking the model" + (f", after {wait:g} s" if wait > 0 else "")
        )
        proposal = Proposal("tool", call=call, notes=(note,))
        return ModelReply(
            proposal,
            NO_USAGE,
            settings,
            level="rule",
            ruled_by=decision.rule,
            timeout_factor=factor,
            retry_cap=left - 1,
        )

    async def strictness(self, key: str, settings: ActuatorSettings) -> Strictness:
        """The rung of the strictness ladder this proposal runs on: the key's scheduled
        one, raised to the prior (configured, or this model's loose record) until the key
        has been measured in this run."""
        level = settings.strictness
        if self.actuators.get(key) is not None:
            return level
        floor = await self.run.controllers.strictness_floor(self.run.settings.model.name)
        return level if floor is None or floor.rank <= level.rank else floor

    def bounds(self) -> Bounds:
        """The grammar's string bounds from the control configuration."""
        config = self.run.settings.control
        return {
            "max_answer_chars": config.max_answer_chars,
            "max_string_chars": config.max_string_chars,
        }

    def answer_open(self) -> bool:
        """Whether the task's completion predicate can hold now, so the grammar may offer
        the answer: every required field a tool must fill is filled, or (with no such
        field) a tool has answered successfully at least once."""
        run = self.run
        state = run.state
        sourced = [f for f in run.task.required_fields if f.source is not None]
        if sourced:
            return all(state.required_fields.get(f.name) is not None for f in sourced)
        if not self.visible_tools():
            return True
        return any(e.observation.get("status") == "ok" for e in state.observations)

    def reply_errors(self, reply: ModelReply) -> list[str]:
        """What the validator says about a reply before anything runs (empty: it may go on)."""
        errors = self.validate(reply)
        call = reply.proposal.call
        if not errors and reply.proposal.kind == "tool" and call is not None:
            state = self.run.state
            errors = self.run.validator.call_errors(call, phase=state.phase, latest=state.latest())
        return errors

    async def sample(
        self,
        messages: Sequence[Mapping[str, str]],
        schema: Mapping[str, Any] | None,
        native_tools: list[dict[str, Any]] | None,
        settings: ActuatorSettings,
        strict: bool,
    ) -> tuple[ModelReply, str]:
        """One proposal from the model (two samples that must agree under dual
        verification), with the text of its first reply for a re-ask."""
        run, cfg = self.run, self.run.settings
        dual = run.control.protocol is Protocol.DUAL_VERIFICATION
        calls, summary = await run.model_io.sample(
            messages, schema=schema, tools=native_tools, dual=dual, settings=settings
        )
        text = next((c.completion.text for c in calls if c.completion is not None), "")
        halts = [c.halt for c in calls if c.halt is not None]
        if halts:
            return ModelReply(Proposal("invalid"), summary, settings, halts[0], strict), text
        failures = [c.failure for c in calls if c.failure is not None]
        if failures:
            invalid = Proposal("invalid", errors=tuple(failures))
            return ModelReply(invalid, summary, settings, None, strict), text
        completions = [c.completion for c in calls if c.completion is not None]
        proposals = [parse_proposal(c, native=cfg.native) for c in completions]
        sensed = proposal_confidence(proposals, completions)
        voted = vote(proposals)
        proposal = voted.proposal
        if voted.note and voted.note not in proposal.notes:
            proposal = replace(proposal, notes=(*proposal.notes, voted.note))
        reply = ModelReply(proposal, summary, settings, None, strict)
        return replace(reply, disagreement=voted.disagreement, confidence=sensed), text

    # --- validate, act, observe, measure -------------------------------------------------

    async def decide(
        self, reply: ModelReply, key: str, phase: str, judge: Judge | None = None
    ) -> Outcome:
        """Everything after the proposal: halt, handover, validation, then the action."""
        run = self.run
        if reply.halt is not None:
            return Outcome(
                reply=reply,
                proposing_key=key,
                step_type=key,
                phase=phase,
                error=1.0,
                measured=False,
                halt=reply.halt,
                notes=[f"the model call was cut off ({reply.halt.value})"],
            )
        if run.control.protocol is Protocol.MANUAL_HANDOVER:
            reason = f"f_est {run.control.f_est:.2f} reached the manual-handover level"
            return await self.handover(reply, key, phase, reason)
        if (early := early_handover(run, reply.proposal.call)) is not None:
            return await self.handover(reply, key, phase, early)
        errors = self.validate(reply)
        if errors:
            return await self.refuse(reply, key, errors, phase, judge)
        if reply.proposal.kind == "final":
            return await self.act_final(reply, key, phase, judge)
        return await self.act_tool(reply, key, phase, judge)

    def validate(self, reply: ModelReply) -> list[str]:
        """Why the proposal's kind is refused in this phase (empty: go on)."""
        p = reply.proposal
        if p.kind == "invalid":
            return list(p.errors) or ["no usable reply"]
        return self.run.validator.kind_errors(self.run.state.phase, p.kind)

    async def refuse(
        self, reply: ModelReply, key: str, errors: list[str], phase: str, judge: Judge | None
    ) -> Outcome:
        """Refuse the proposal: nothing runs; the reasons are the model's next observation."""
        state = self.run.state
        state.failures.extend(errors)
        state.notes.append("your last reply was refused: " + "; ".join(errors))
        notes, halt = await judge(reply.proposal.call, None) if judge else ([], None)
        return Outcome(
            reply=reply,
            proposing_key=key,
            step_type=key,
            phase=phase,
            error=1.0,
            validation_errors=errors,
            action=reply.proposal.call,
            notes=[*reply.proposal.notes, *notes],
            halt=halt,
        )

    async def handover(self, reply: ModelReply, key: str, phase: str, reason: str) -> Outcome:
        """MANUAL_HANDOVER: freeze the task with its pending action for a human."""
        note = await freeze(self.run, reply.proposal, key, reason)
        return Outcome(
            reply=reply,
            proposing_key=key,
            step_type=key,
            phase=phase,
            measured=False,
            action=reply.proposal.call,
            notes=[note],
            halt=HaltReason.HANDOVER,
        )

    def accepted(self, reply: ModelReply, key: str, phase: str, note: str) -> Outcome:
        """A step the plan modes settle in code (a plan accepted, a step skipped): no
        action, no error, progress."""
        return Outcome(
            reply=reply, proposing_key=key, step_type=key, phase=phase, notes=[note], progress=True
        )

    async def act_final(
        self, reply: ModelReply, key: str, phase: str, judge: Judge | None
    ) -> Outcome:
        """A final answer: accepted only when every required field is filled and valid."""
        run = self.run
        state = run.state
        p = reply.proposal
        problems, progress = run.take_fields(p.fields)
        if problems:
            text = "; ".join(f"{n}: {', '.join(ps)}" for n, ps in problems.items())
            note = (
                f"final answer refused: the task is not complete ({text}); every required field "
                "needs a validated value first"
            )
            state.notes.append(note)
            state.failures.append(note)
            notes, halt = await judge(reply.proposal.call, None) if judge else ([], None)
            return Outcome(
                reply=reply,
                proposing_key=key,
                proposal_error=1.0,
                step_type=FINAL,
                phase=phase,
                error=1.0,
                validation_errors=[note],
                notes=[*p.notes, *notes],
                progress=progress,
                halt=halt,
            )
        answer, notes = await self.accept_answer(p.answer or "", list(p.notes))
        return Outcome(
            reply=reply,
            proposing_key=key,
            proposal_error=0.0,
            step_type=FINAL,
            phase=phase,
            error=0.0,
            final_answer=answer,
            notes=notes,
            progress=True,
            halt=HaltReason.FINAL,
        )

    async def accept_answer(self, answer: str, notes: list[str]) -> tuple[str, list[str]]:
        """An accepted answer, formatted (unless dimension reduction skips it) and
        remembered: ``(answer, notes)``."""
        run = self.run
        state = run.state
        fmt = run.settings.format_answer
        if fmt is not None:
            if run.control.protocol is Protocol.DIMENSION_REDUCTION:
                notes.append(
                    "dimension reduction: the non-core formatting was skipped; plain result"
                )
            else:
                answer = fmt(answer, dict(state.required_fields))
        await run.memory.remember(
            "final",
            run_id=state.run_id,
            task=state.prompt,
            arguments=state.required_fields,
            observed=answer,
        )
        return answer, notes

    def completed_answer(self, call: ActionCall, observation: Observation) -> str | None:
        """The answer when this tool's observation makes the task's completion predicate
        hold (every required field filled and valid, and no tool kept for the committing
        phase; or, without required fields, the configured predicate), else None: the run
        then ends on it instead of asking the model again."""
        run = self.run
        config = run.settings.control
        required = run.task.required_fields
        if required:
            fields = run.state.required_fields
            if not config.end_when_complete or field_problems(required, fields):
                return None
            if any(
                t.phases is not None and "committing" in t.phases and "collecting" not in t.phases
                for t in run.settings.tools.values()
            ):
                return None  # a tool that acts on the complete fields has yet to run
            if len(required) == 1:
                return _text(fields[required[0].name])
            return _text({f.name: fields[f.name] for f in required})
        predicate = config.completion_predicate
        if predicate is None or observation.status is not ObservationStatus.OK:
            return None
        try:
            done = bool(predicate(call, observation))
        except Exception as exc:  # a predicate that raises reads as "not yet", noted
            run.state.failures.append(f"completion predicate raised {type(exc).__name__}: {exc}")
            return None
        return _text(observation.value) if done else None

    async def act_tool(
        self, reply: ModelReply, key: str, phase: str, judge: Judge | None
    ) -> Outcome:
        """A tool call: validated, not a repeat, run under the tool's settings, observed
        and measured."""
        run = self.run
        state = run.state
        call = reply.proposal.call
        assert call is not None
        errors = run.validator.call_errors(call, phase=state.phase, latest=state.latest())
        if errors:
            return await self.refuse(reply, key, errors, phase, judge)
        tool = run.settings.tools[call.tool]
        base = Outcome(reply=reply, proposing_key=key, step_type=key, phase=phase, action=call)
        if run.control.protocol is Protocol.DIMENSION_REDUCTION and not tool.core:
            note = f"dimension reduction: {tool.name} is not a core step and was skipped"
            state.notes.append(note)
            notes, halt = await judge(call, None) if judge else ([], None)
            return replace(base, error=0.0, notes=[note, *notes], halt=halt)
        signature = action_signature(call.tool, call.arguments)
        repeats = count_repeats(signature, state.signatures, run.settings.repeat_window)
        if repeats and run.tool_io.allows_repeat(tool, signature):
            repeats = 0  # asking again after a passing fault is a retry, not a loop
        state.signatures = [*state.signatures, signature][-32:]
        state.repeat_count = repeats
        if repeats and judge is None:
            closed = await self.close_on_repeat(base, signature)
            if closed is not None:
                return closed
        if repeats:
            hint = (
                f"{call.tool} was proposed again with the same arguments (timestamps and ids "
                f"ignored; repeat {repeats}); it was not run again. Its answer is above: if it "
                "completes the task, answer from it; otherwise change the arguments or call "
                "another tool."
            )
            state.notes.append(hint)
            state.failures.append(f"repeated action {call.tool} ({repeats}x)")
            notes, halt = await judge(call, None) if judge else ([], None)
            return replace(base, error=1.0, notes=[hint, *notes], halt=halt)
        # act: under the tool's own settings, handed on from its last update
        settings = await self.settings(act_key(tool.name))
        if reply.timeout_factor != 1.0:
            settings = replace(settings, timeout_ms=settings.timeout_ms * reply.timeout_factor)
        if reply.retry_cap is not None and settings.max_retries > reply.retry_cap:
            settings = replace(settings, max_retries=reply.retry_cap)
        ran = await run.tool_io.run(tool, call, settings)
        acted = replace(base, step_type=act_key(tool.name), settings=settings, retries=ran.retries)
        if ran.observation is None or ran.outcome is None:
            note = f"the call to {tool.name} was cut off ({ran.halt})"
            return replace(acted, error=1.0, measured=False, notes=[note], halt=ran.halt)
        if ran.outcome.status is OutcomeStatus.CONFIRMATION_REQUIRED:
            # Nothing ran: once confirmed, the same call must not count as a repeat.
            state.signatures = state.signatures[:-1]
            state.repeat_count = 0
            why = f"{tool.name} needs a human confirmation before it runs"
            return await self.handover(reply, key, phase, why)
        observation = ran.observation
        dumped, progress, guard = await self.observe(tool, call, observation)
        error = self.measure(tool, call, observation)
        if ran.escalation is not None:  # the event bus's answer: a human takes over
            handed = await self.handover(
                reply, key, phase, f"the event bus escalated: {ran.escalation}"
            )
            return replace(
                handed,
                step_type=acted.step_type,
                settings=settings,
                retries=ran.retries,
                error=error,
                observation=dumped,
            )
        retry_notes = (
            [
                f"{tool.name} was asked {len(ran.retries)} more time(s) after a passing fault, "
                "a broken connection or an empty answer"
            ]
            if ran.retries
            else []
        )
        notes, judged = await judge(call, observation) if judge else ([], None)
        # A plan mode ends on the predicate only once its plan is carried out: a later
        # plan step may still act on the fields this call completed.
        plan_done = judge is None or (judged is None and self.run.state.phase == "finishing")
        done = self.completed_answer(call, observation) if plan_done else None
        answer = None
        if done is not None:
            answer, done_notes = await self.accept_answer(
                done, ["the task's completion predicate holds after this call: the run ends"]
            )
            notes = [*notes, *done_notes]
            judged = HaltReason.FINAL
        return replace(
            acted,
            # A call a rule made measures nothing about the model's proposing.
            proposal_error=None if reply.ruled_by is not None else 0.0,
            error=error,
            observation=dumped,
            final_answer=answer,
            notes=[*reply.proposal.notes, *guard, *retry_notes, *notes],
            progress=progress,
            halt=judged,
        )

    async def close_on_repeat(self, base: Outcome, signature: str) -> Outcome | None:
        """The run closed with the result of the call that last ran, when the model
        proposes it again and it succeeded (``ControlConfig.end_on_repeat``, a task without
        required fields); None leaves the repeat to the guard."""
        run = self.run
        if not run.settings.control.end_on_repeat or run.task.required_fields:
            return None
        earlier = repeated_success(signature, run.state.observations)
        if earlier is None:
            return None
        run.state.repeat_count = 0
        answer, notes = await self.accept_answer(
            _text(earlier.get("value")),
            [
                f"{base.action.tool if base.action else 'the tool'} was proposed again with "
                "the same arguments after it succeeded: the run ends with its result"
            ],
        )
        # The proposal fed its own key with e = 0 (it was right to stop); nothing ran.
        return replace(base, error=0.0, final_answer=answer, notes=notes, halt=HaltReason.FINAL)

    async def observe(
        self, tool: Tool, call: ActionCall, observation: Observation
    ) -> tuple[dict[str, Any], bool, list[str]]:
        """The observation into the state, a success remembered, the rules' note on a
        known cause of a poor answer: ``(compacted observation, progress, notes)``."""
        run = self.run
        state = run.state
        dumped, progress = absorb(run, tool, call, observation)
        if progress and observation.status is ObservationStatus.OK:
            await run.memory.remember(
                tool.name,
                run_id=state.run_id,
                task=state.prompt,
                arguments=call.arguments,
                observed=summarise_observation(dumped),
            )
        return dumped, progress, await run.guard(observation, call)

    def measure(self, tool: Tool, call: ActionCall, observation: Observation) -> float:
        """The step's error e ∈ [0, 1] under the tool's metric (a metric that raises
        reads as an error of 1, never ends the run)."""
        try:
            return float(self.run.settings.control.metric_for(tool.name)(call, observation))
        except Exception as exc:
            self.run.state.failures.append(
                f"metric for {tool.name} raised {type(exc).__name__}: {exc}"
            )
            return 1.0

    # --- control, halt, record -----------------------------------------------------------

    async def control(self, outcome: Outcome) -> Controlled:
        """Feed the PIDs (the proposing key, then the acting key) and the task-level
        observers; nothing is fed when nothing was measured."""
        run = self.run
        controllers = run.controllers
        actuators = self.actuators
        if outcome.proposal_error is not None:
            e_proposal = max(outcome.proposal_error, outcome.reply.disagreement)
            fed = await controllers.update(actuators, outcome.proposing_key, e_proposal)
            actuators = fed.actuators
        e = min(1.0, max(0.0, outcome.error))
        key = outcome.step_type
        if not outcome.measured:  # nothing new was measured: the signals hold their values
            update = await controllers.held(actuators, key)
            quality = 1.0 - e
            if run.records:
                e, quality = run.records[-1].error, run.records[-1].quality
            ctl = run.control
            return Controlled(update, e, quality, ctl.f_est, ctl.protocol, ctl.steps.last)
        update = await controllers.update(actuators, key, e)
        run.last_errors[key] = e
        u_used = (outcome.settings or outcome.reply.settings).u
        reading = run.control.observe(u_used, 1.0 - e, run.completion())
        return Controlled(
            update, e, reading.quality, reading.f_est, reading.protocol, reading.verdict
        )

    def halt(self, outcome: Outcome) -> HaltReason | None:
        """Why the run ends after this step: the outcome's own reason, else a stop check."""
        return outcome.halt if outcome.halt is not None else self.run.stop_reason()

    def record(self, outcome: Outcome, ctl: Controlled, halt: HaltReason | None) -> StepRecord:
        """The step as the trace keeps it, with every signal that crossed it."""
        run = self.run
        state = run.state
        reply = outcome.reply
        settings = outcome.settings or reply.settings
        actuators = {
            **settings.as_dict(),
            "model": run.model_io.rung_model(reply.settings).name,
            "model_rung": run.model_io.ladder().index(reply.settings.rung),
            "model_votes": reply.usage.model_calls,
            "tool_calling": "native" if run.settings.native else "json",
            "constrained_decoding": reply.strict,
            "strictness_used": reply.level,
            "reasks": reply.reasks,
            "model_u": reply.u,
            "proposed_by": "model" if reply.ruled_by is None else f"rule:{reply.ruled_by}",
        }
        if acted := run.tool_io.take_acted():  # actions taken on an estimate (_acting.py)
            actuators["acted"] = acted
        notes = list(outcome.notes) if self.gate_note is None else [self.gate_note, *outcome.notes]
        lyapunov = ctl.lyapunov
        return StepRecord(
            run_id=state.run_id,
            task_id=state.task_id,
            step=state.step - 1,
            t_s=state.elapsed_s,
            phase=outcome.phase or state.phase,
            mode=run.settings.mode,
            step_type=outcome.step_type,
            action=outcome.action,
            effect=self._effect_of(outcome.action),
            final_answer=outcome.final_answer,
            validation_errors=list(outcome.validation_errors),
            observation=outcome.observation,
            error=ctl.error,
            control=ctl.update.u,
            pid_components=ctl.update.components,
            quality=ctl.quality,
            f_est=ctl.f_est,
            protocol=ctl.protocol.value,
            actuators=actuators,
            lyapunov_v=None if lyapunov is None else lyapunov.V,
            lyapunov_dv=None if lyapunov is None else lyapunov.dV,
            repeat_count=state.repeat_count,
            retries=[dict(r) for r in outcome.retries],
            notes=notes if run.resume_note is None else [run.resume_note, *notes],
            usage=reply.usage,
            halt=halt,
            confidence=reply.confidence,
        )

    def _effect_of(self, action: ActionCall | None) -> str | None:
        tool = None if action is None else self.run.settings.tools.get(action.tool)
        return None if tool is None else tool.effect.value

    async def close(self, outcome: Outcome) -> StepRecord:
        """control → halt → record, then the run folds the record in."""
        ctl = await self.control(outcome)
        self.run.advance(outcome.progress)
        record = self.record(outcome, ctl, self.halt(outcome))
        await self.run.fold(record, ctl.update.actuators)
        return record

    async def finish(
        self, reply: ModelReply, key: str, phase: str, judge: Judge | None = None
    ) -> StepRecord:
        """From a proposal to the step's record: :meth:`decide`, then :meth:`close`."""
        return await self.close(await self.decide(reply, key, phase, judge))
