"""The propose stage: a proposal made in code, the action a human decided on, a rule's
call, or the model's.

The model is asked on one rung of the strictness ladder loose → re-ask → grammar: the
proposing key's scheduled rung, raised before the key's first measurement in the run to
the prior (``ControlConfig.strictness_prior``, or the grammar for a model whose recent
loose replies were mostly refused). On the re-ask rung a reply the validator refuses goes
back to the model within the step with the validator's error text; on the grammar rung
the reply decodes under the tight action schema, whose answer branch opens only once the
task's completion predicate can hold (:func:`answer_open`). The reply keeps the rung used
(``level``) and the re-asks; its edits say which notes the model was shown and what it
spent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypedDict

from ..control import ActuatorSettings, Strictness
from ..control import Protocol as DefenceProtocol
from ._actions import Proposal, final_tool_schema, parse_proposal
from ._escalation import climb, draw_until, sample_confidence
from ._fold import Noted, Shown, Spent, TakenPending
from ._gate import ruled
from ._projection import project as project_state
from ._protocols import proposal_confidence, vote
from ._records import ActionCall, HaltReason, RunUsageSummary
from ._relevance import shown_count
from ._state import PendingAction
from ._view import NO_USAGE, ModelReply, View, visible_tools

if TYPE_CHECKING:
    from ._run import Run

__all__ = [
    "Bounds",
    "add_usage",
    "answer_open",
    "bounds",
    "propose",
    "reask_messages",
    "reply_errors",
    "validate",
]


class Bounds(TypedDict):
    """The strict grammar's string bounds, as keyword arguments of ``action_schema``."""

    max_answer_chars: int
    max_string_chars: int


def bounds(run: Run) -> Bounds:
    """The grammar's string bounds from the control configuration."""
    config = run.settings.control
    return {
        "max_answer_chars": config.max_answer_chars,
        "max_string_chars": config.max_string_chars,
    }


def answer_open(run: Run) -> bool:
    """Whether the task's completion predicate can hold now, so the grammar may offer
    the answer: every required field a tool must fill is filled, or (with no such
    field) a tool has answered successfully at least once."""
    state = run.state
    sourced = [f for f in run.task.required_fields if f.source is not None]
    if sourced:
        return all(state.required_fields.get(f.name) is not None for f in sourced)
    if not visible_tools(run):
        return True
    return any(e.observation.get("status") == "ok" for e in state.observations)


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


def validate(run: Run, phase: str, proposal: Proposal) -> list[str]:
    """Why the proposal's kind is refused in this phase (empty: go on)."""
    if proposal.kind == "invalid":
        return list(proposal.errors) or ["no usable reply"]
    return run.validator.kind_errors(phase, proposal.kind)


def reply_errors(run: Run, view: View, proposal: Proposal) -> list[str]:
    """What the validator says about a proposal before anything runs (empty: it may go on)."""
    errors = validate(run, view.phase, proposal)
    call = proposal.call
    if not errors and proposal.kind == "tool" and call is not None:
        errors = run.validator.call_errors(call, phase=view.phase, latest=run.state.latest())
    return errors


def _decided(pending: PendingAction, settings: ActuatorSettings) -> ModelReply:
    note = ("the action frozen for a human decision, as decided",)
    if pending.kind == "tool" and pending.tool is not None:
        call = ActionCall(tool=pending.tool, arguments=pending.arguments)
        proposal = Proposal("tool", call=call, notes=note)
    else:
        proposal = Proposal("final", answer=pending.answer, fields=pending.fields, notes=note)
    return ModelReply(proposal, NO_USAGE, settings, edits=(TakenPending(),))


async def propose(run: Run, view: View) -> ModelReply:
    """This step's proposal: the one its mode made in code, the frozen action after a
    resume, the rule's call past the gate, else the model's."""
    ask = view.ask
    if ask.made is not None or ask.settled is not None:
        return ModelReply(ask.made or Proposal("invalid"), NO_USAGE, view.settings)
    if run.state.pending is not None:  # the frozen action, as a human decided it
        return _decided(run.state.pending, view.settings)
    gate = await ruled(run, view)
    if gate.reply is not None:
        return replace(gate.reply, gated=True)
    reply = await ask_model(run, view, gate.note)
    if (
        "plan" in ask.kinds
        and reply.halt is None
        and reply.proposal.kind not in ("plan", "invalid")
    ):
        wrong = f"phase planning expects a plan, not a {reply.proposal.kind}"
        invalid = Proposal("invalid", errors=(wrong,))
        reply = ModelReply(
            invalid,
            reply.usage,
            reply.settings,
            None,
            reply.strict,
            edits=reply.edits,
            gate_note=gate.note,
            gated=True,
        )
    return reply


async def strictness(run: Run, view: View) -> Strictness:
    """The rung of the strictness ladder this proposal runs on: the key's scheduled
    one, raised to the prior (configured, or this model's loose record) until the key
    has been measured in this run."""
    level = view.settings.strictness
    if view.carry.actuators.get(view.key) is not None:
        return level
    floor = await run.controllers.strictness_floor(run.settings.model.name)
    return level if floor is None or floor.rank <= level.rank else floor


def _messages(run: Run, view: View, kinds: frozenset[str]) -> list[dict[str, str]]:
    cfg, settings = run.settings, view.settings
    options = cfg.projection
    if settings.context < 1.0:  # a lost model sees fewer of the recent observations
        options = replace(options, observations=shown_count(options.observations, settings.context))
    return project_state(
        run.state,
        phase=view.phase,
        tools=view.shown,
        required=run.task.required_fields,
        kinds=kinds,
        native=cfg.native,
        settings=settings,
        rigour=cfg.control.rigour_prompt,
        max_steps=cfg.max_steps,
        protocol=run.control.protocol.value,
        options=options,
        extra_notes=view.ask.hints,
    )


async def ask_model(run: Run, view: View, gate_note: str | None) -> ModelReply:
    """The model's proposal on this step's rung of the strictness ladder, re-asked with the
    validator's reasons on the re-ask rung; past the rule gate, which left ``gate_note``."""
    cfg, models, ask = run.settings, run.model_io, view.ask
    grammar_before = models.grammar_ok
    level = await strictness(run, view)
    strict = level is Strictness.STRICT and not cfg.native and models.grammar_ok
    kinds, visible = ask.kinds, view.shown
    if strict and "tool" in kinds and visible and not answer_open(run):
        kinds = kinds - {"final"}  # the prompt offers what the grammar offers
    messages = _messages(run, view, kinds)
    shown = Shown(len(run.state.notes))
    native_tools = None
    if cfg.native and ("tool" in kinds or "final" in kinds):
        native_tools = [t.openai_schema() for t in visible if "tool" in kinds]
        if "final" in kinds:
            native_tools.append(final_tool_schema(run.task.required_fields))
    schema = ask.schema(visible, True) if strict and ask.schema is not None else None
    reply, text = await sample(run, view, messages, schema, native_tools, strict)
    used = level if strict or level is not Strictness.STRICT else Strictness.REASK
    reasks = 0
    if used is Strictness.REASK:  # under the grammar, a refusal goes to the next step
        while reasks < cfg.control.max_reasks and reply.halt is None:
            errors = reply_errors(run, view, reply.proposal)
            if not errors:
                break
            reasks += 1
            messages = [*messages, *reask_messages(text, errors)]
            again, text = await sample(run, view, messages, schema, native_tools, strict)
            reply = replace(again, usage=add_usage(reply.usage, again.usage))
    if used is Strictness.LOOSE and not cfg.native and reply.halt in (None, HaltReason.DEADLINE):
        # What this model does with no help: the warm start of its next run's rung. A
        # loose reply still running at the deadline is one the model could not give.
        refused = 1.0 if reply.halt is not None or reply_errors(run, view, reply.proposal) else 0.0
        await run.controllers.note_loose(cfg.model.name, refused)
    edits: list[Any] = [shown]
    if grammar_before and not models.grammar_ok and models.grammar_failure is not None:
        edits.append(Noted(failures=(models.grammar_failure,)))
    if reply.usage.model_calls:
        edits.append(Spent(reply.usage, models.budget_left()))
    # One copy for what the ladder and the gate add: each ``replace`` copies every field.
    return replace(
        reply,
        level=used.value,
        reasks=reasks,
        edits=tuple(edits),
        gated=True,
        gate_note=gate_note,
    )


async def sample(
    run: Run,
    view: View,
    messages: Sequence[Mapping[str, str]],
    schema: Mapping[str, Any] | None,
    native_tools: list[dict[str, Any]] | None,
    strict: bool,
) -> tuple[ModelReply, str]:
    """One proposal from the model (two samples that must agree under dual
    verification), with the text of its first reply for a re-ask; with a cascade
    (``ControlConfig.sampling``), from the first rung confident enough, before
    anything runs."""

    async def ask(on: ActuatorSettings) -> tuple[ModelReply, str]:
        return await sample_rung(run, view, messages, schema, native_tools, on, strict)

    reply, text = await ask(view.settings)
    if not run.settings.control.sampling.cascades or reply.halt is not None:
        return reply, text
    reply, text, usage, reading = await climb(run, reply, text, ask)
    return replace(reply, usage=usage, sampling=reading), text


async def sample_rung(
    run: Run,
    view: View,
    messages: Sequence[Mapping[str, str]],
    schema: Mapping[str, Any] | None,
    native_tools: list[dict[str, Any]] | None,
    settings: ActuatorSettings,
    strict: bool,
) -> tuple[ModelReply, str]:
    """One proposal on the rung ``settings.rung``: the scheduled votes all at once, or
    one sample at a time until the stop rule of ``ControlConfig.sampling`` stops."""
    cfg = run.settings
    dual = run.control.protocol is DefenceProtocol.DUAL_VERIFICATION
    rule = cfg.control.sampling.rule(cfg.logprobs)
    if rule is not None and not dual:
        calls, summary = await draw_until(
            run, messages, schema=schema, tools=native_tools, settings=settings, rule=rule
        )
    else:
        calls, summary = await run.model_io.sample(
            messages,
            schema=schema,
            tools=native_tools,
            dual=dual,
            step=view.step,
            settings=settings,
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
    # Dual verification's two samples must agree: a weight never decides between them.
    weights = None if dual else [sample_confidence(c.confidence) for c in completions]
    voted = vote(proposals, weights)
    proposal = voted.proposal
    if voted.note and voted.note not in proposal.notes:
        proposal = replace(proposal, notes=(*proposal.notes, voted.note))
    reply = ModelReply(
        proposal,
        summary,
        settings,
        None,
        strict,
        disagreement=voted.disagreement,
        confidence=sensed,
    )
    return reply, text
