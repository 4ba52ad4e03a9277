"""The strictness ladder: loose → re-ask with the validator's error → the action grammar.

A tight grammar (one alternative per tool, every free string bounded, the answer branch
gated on the completion predicate), a prior from the model's loose record, escalation text
that never invites giving up, and a run that ends once a tool's answer completes the task.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from closedloop import ConfigurationError, Runtime
from closedloop.agent import (
    Agent,
    ControlConfig,
    HaltReason,
    RequiredField,
    RunLimits,
    Task,
    tool,
)
from closedloop.agent._actions import action_schema, bound_schema
from closedloop.agent._actuators import loose_key
from closedloop.agent._control import rigour_instruction
from closedloop.agent._tools import tools_by_name
from closedloop.control import (
    ActuatorSchedule,
    FeedbackIntensity,
    Strictness,
    schedule_strictness,
)
from closedloop.feedback import MemoryStore
from closedloop.models import CallInfo, FunctionModel, Message, ScriptedModel
from closedloop.perception import ObservationStatus

from .conftest import add, call, convert_temperature, final, make_agent, scripted, system_of


def note(text: str, tag: str = "") -> str:
    """Save a note (free text: nothing in its schema bounds it)."""
    return f"saved {tag}:{text}"


def _variants(schema: dict[str, Any]) -> list[dict[str, Any]]:
    return list(schema.get("oneOf", [schema]))


# --- the tight action grammar -----------------------------------------------------------


def test_the_strict_schema_has_one_alternative_per_tool_with_its_full_arguments() -> None:
    tools = list(tools_by_name([convert_temperature, add]).values())
    schema = action_schema(tools, strict=True)
    variants = _variants(schema)
    assert "oneOf" in schema and len(variants) == 3  # two tools and the answer
    by_tool = {v["properties"]["tool"]["const"]: v for v in variants if "tool" in v["properties"]}
    assert set(by_tool) == {"convert_temperature", "add"}
    args = by_tool["convert_temperature"]["properties"]["arguments"]
    assert args["properties"]["to_unit"]["enum"] == ["celsius", "fahrenheit", "kelvin"]
    assert set(args["required"]) == {"value", "from_unit", "to_unit"}
    assert args["additionalProperties"] is False  # no invented keys
    assert by_tool["add"]["properties"]["arguments"]["properties"]["a"]["type"] == "number"


def test_every_free_string_in_the_strict_schema_is_bounded() -> None:
    tools = list(tools_by_name([note, convert_temperature]).values())
    required = [RequiredField(name="summary", schema={"type": "string"})]
    schema = action_schema(tools, required, strict=True, max_answer_chars=50, max_string_chars=30)
    unbounded: list[str] = []

    def walk(node: Any, path: str) -> None:
        if isinstance(node, list):
            for i, n in enumerate(node):
                walk(n, f"{path}[{i}]")
        elif isinstance(node, dict):
            free = not any(k in node for k in ("enum", "const", "pattern", "format"))
            if node.get("type") == "string" and free and "maxLength" not in node:
                unbounded.append(path)
            for k, v in node.items():
                walk(v, f"{path}.{k}")

    walk(schema, "$")
    assert unbounded == []
    answer = next(v for v in _variants(schema) if "final" in v["properties"])
    assert answer["properties"]["final"]["maxLength"] == 50
    assert answer["properties"]["fields"]["properties"]["summary"]["maxLength"] == 50
    tool_args = next(
        v for v in _variants(schema) if v["properties"].get("tool", {}).get("const") == "note"
    )
    assert tool_args["properties"]["arguments"]["properties"]["text"]["maxLength"] == 30


def test_bound_schema_keeps_explicit_bounds_and_bounded_kinds() -> None:
    schema = {
        "type": "object",
        "properties": {
            "code": {"type": "string", "maxLength": 8},
            "unit": {"type": "string", "enum": ["a", "b"]},
            "tags": {"type": "array", "items": {"type": "string"}},
            "open": {"type": "object", "additionalProperties": True},
        },
    }
    out = bound_schema(schema, max_string_chars=12, max_items=3)
    assert out["properties"]["code"]["maxLength"] == 8
    assert "maxLength" not in out["properties"]["unit"]
    assert out["properties"]["tags"] == {
        "type": "array",
        "items": {"type": "string", "maxLength": 12},
        "maxItems": 3,
    }
    assert out["properties"]["open"]["additionalProperties"] is True
    assert out["additionalProperties"] is False
    assert schema["properties"]["code"] == {"type": "string", "maxLength": 8}  # not mutated


def test_the_answer_branch_can_be_left_out_while_there_is_a_tool_to_call() -> None:
    tools = list(tools_by_name([add]).values())
    gated = action_schema(tools, strict=True, allow_final=False)
    assert "oneOf" not in gated and gated["properties"]["tool"] == {"const": "add"}
    assert "final" not in json.dumps(gated)
    # with no tool at all, the answer is the only thing left to say
    alone = action_schema((), strict=True, allow_final=False)
    assert "final" in alone["properties"]


def test_the_strict_schema_compiles_to_a_bounded_llama_cpp_grammar() -> None:
    grammar = pytest.importorskip("llama_cpp.llama_grammar")
    tools = list(tools_by_name([note, convert_temperature, add]).values())
    schema = action_schema(tools, strict=True, max_answer_chars=40, max_string_chars=25)
    gbnf = grammar.json_schema_to_gbnf(json.dumps(schema))
    assert "root ::=" in gbnf
    # the bounds survive into the grammar as nested optional characters; no open-ended
    # string rule (``char*``) is left anywhere
    assert "char*" not in gbnf and "char+" not in gbnf
    depths = {line.count("(char") for line in gbnf.splitlines()}
    assert {40, 25} <= depths
    assert '"\\"convert_temperature\\""' in gbnf


# --- the ladder, scheduled from u ---------------------------------------------------------


def test_the_strictness_schedule_is_one_ladder() -> None:
    ladder = schedule_strictness(0.7, reask=0.3)
    assert [ladder(u) for u in (0.0, 0.29, 0.3, 0.69, 0.7, 1.0)] == [
        Strictness.LOOSE,
        Strictness.LOOSE,
        Strictness.REASK,
        Strictness.REASK,
        Strictness.STRICT,
        Strictness.STRICT,
    ]
    assert [s.rank for s in (Strictness.LOOSE, Strictness.REASK, Strictness.STRICT)] == [0, 1, 2]
    assert schedule_strictness(0.7)(0.5) is Strictness.LOOSE  # two rungs unless asked


def _reask_model() -> FunctionModel:
    def reply(messages: tuple[Message, ...], info: CallInfo) -> Any:
        last = messages[-1].content
        if messages[-1].role == "user" and "That reply was refused" in last:
            return call("add", a=1, b=2)
        if "Observations" in last:
            return final("3")
        return call("add", a=1)  # b is missing: the validator refuses it

    return FunctionModel(reply)


async def test_the_reask_rung_sends_the_validators_error_back_within_the_step() -> None:
    model = _reask_model()
    agent, _ = make_agent(model, [add], control=ControlConfig(strictness_prior=Strictness.REASK))
    result = await agent.run("1+2")
    first = result.steps[0]
    assert first.action is not None and first.action.arguments == {"a": 1, "b": 2}
    assert first.validation_errors == []
    assert first.usage.model_calls == 2  # the reply and its re-ask
    assert first.actuators["strictness_used"] == "reask" and first.actuators["reasks"] == 1
    reask = model.calls[1].messages
    assert reask[-2].role == "assistant" and '"a": 1' in reask[-2].content
    assert "'b' is a required property" in reask[-1].content
    assert model.calls[1].response_schema is None  # the re-ask rung is no grammar
    assert result.success and result.answer == "3"


async def test_without_reasks_the_same_reply_is_refused_for_the_next_step() -> None:
    model = _reask_model()
    config = ControlConfig(strictness_prior=Strictness.REASK, max_reasks=0)
    agent, _ = make_agent(model, [add], control=config)
    result = await agent.run("1+2")
    assert result.steps[0].validation_errors and result.steps[0].usage.model_calls == 1


async def test_a_configured_prior_constrains_the_first_call() -> None:
    model = scripted(call("add", a=1, b=2), final("3"))
    agent, _ = make_agent(model, [add], control=ControlConfig(strictness_prior="strict"))
    result = await agent.run("1+2")
    assert model.calls[0].response_schema is not None
    assert result.steps[0].actuators["strictness_used"] == "strict"
    assert result.steps[0].actuators["constrained_decoding"] is True


async def test_a_model_that_failed_loosely_in_history_starts_on_the_grammar() -> None:
    store = MemoryStore()
    junk = ScriptedModel(
        ["I will add them.", "Sure, adding now.", call("add", a=1, b=2), final("3")], name="tiny"
    )
    first, _ = make_agent(junk, [add], limits=RunLimits(max_steps=4), runtime=Runtime(store=store))
    await first.run("1+2")
    record = await store.record_get("control", loose_key(junk.name))
    assert record is not None and record.value["errors"][0] == 1.0
    assert junk.calls[0].response_schema is None  # with no record yet, loose first

    again = ScriptedModel([call("add", a=1, b=2), final("3")], name="tiny")  # a later run
    second, _ = make_agent(again, [add], runtime=Runtime(store=store))
    result = await second.run("1+2 again")
    assert again.calls[0].response_schema is not None
    assert result.steps[0].actuators["strictness_used"] == "strict"
    # the key's own warm start would still decode loosely: the model's record decided
    assert result.steps[0].actuators["model_u"] < 0.3


async def test_a_model_that_answers_loosely_keeps_loose_decoding() -> None:
    store = MemoryStore()
    await store.record_put("control", loose_key("scripted"), {"errors": [0.0, 0.0, 1.0]})
    model = scripted(call("add", a=1, b=2), final("3"))
    agent, _ = make_agent(model, [add], runtime=Runtime(store=store))
    await agent.run("1+2")
    assert model.calls[0].response_schema is None


async def test_under_the_grammar_the_first_prompt_offers_no_way_out() -> None:
    model = scripted(call("add", a=1, b=2), final("3"))
    always = ControlConfig(schedule=ActuatorSchedule(strictness=schedule_strictness(0.0)))
    agent, _ = make_agent(model, [add], control=always)
    await agent.run("1+2")
    assert "oneOf" not in model.calls[0].response_schema
    assert "when the task is complete" not in system_of(model, 0)
    assert "oneOf" in model.calls[1].response_schema  # after an answer, both
    assert "when the task is complete" in system_of(model, 1)


# --- escalation text --------------------------------------------------------------------


@pytest.mark.parametrize("level", list(FeedbackIntensity))
def test_no_rigour_level_invites_giving_up(level: FeedbackIntensity) -> None:
    schedule = ActuatorSchedule()
    u = {"light": 0.0, "medium": 0.4, "heavy": 0.9}[level.value]
    settings = schedule(u)
    assert settings.feedback_intensity is level
    text = rigour_instruction(settings).lower()
    for phrase in (
        "cannot go on",
        "if you cannot",
        "give a final answer",
        "give up",
        "say what is missing",
    ):
        assert phrase not in text, (level, phrase)


async def test_a_repeat_is_not_answered_with_an_invitation_to_give_up() -> None:
    model = scripted(call("add", a=1, b=2), call("add", a=1, b=2), final("3"))
    agent, _ = make_agent(model, [add])
    result = await agent.run("1+2")
    hint = next(n for r in result.steps for n in r.notes if "proposed again" in n)
    assert "what is missing" not in hint and "answer from it" in hint


# --- completion ends the run ------------------------------------------------------------


@tool(fills={"total": ""})
def total_of(a: float, b: float) -> float:
    """The total of two numbers."""
    return a + b


async def test_a_tool_answer_that_completes_the_task_ends_the_run() -> None:
    model = scripted(call("total_of", a=2, b=3), final("never asked"))
    agent, _ = make_agent(model, [total_of])
    task = Task(prompt="2+3", required_fields=[RequiredField(name="total", source="total_of")])
    result = await agent.run(task)
    assert len(model.calls) == 1  # not asked again to repeat the call or to answer
    assert result.halt_reason is HaltReason.FINAL and result.success
    assert result.answer == "5.0" and result.fields == {"total": 5.0}
    assert result.steps[-1].step_type == "total_of" and result.steps[-1].final_answer == "5.0"


async def test_completion_can_be_switched_off() -> None:
    model = scripted(call("total_of", a=2, b=3), final("5", total=5))
    agent, _ = make_agent(model, [total_of], control=ControlConfig(end_when_complete=False))
    result = await agent.run(Task(prompt="2+3", required_fields=["total"]))
    assert len(model.calls) == 2 and result.answer == "5"


async def test_a_configured_predicate_ends_a_task_without_required_fields() -> None:
    def done(action: Any, observation: Any) -> bool:
        return bool(observation.status is ObservationStatus.OK and action.tool == "add")

    model = scripted(call("add", a=1, b=2), final("never asked"))
    agent, _ = make_agent(model, [add], control=ControlConfig(completion_predicate=done))
    result = await agent.run("1+2")
    assert len(model.calls) == 1 and result.success and result.answer == "3.0"
    # without one, the model answers as before
    plain = scripted(call("add", a=1, b=2), final("3"))
    agent, _ = make_agent(plain, [add])
    assert (await agent.run("1+2")).answer == "3" and len(plain.calls) == 2


async def test_a_predicate_that_raises_reads_as_not_done() -> None:
    def broken(action: Any, observation: Any) -> bool:
        raise RuntimeError("no")

    model = scripted(call("add", a=1, b=2), final("3"))
    agent, _ = make_agent(model, [add], control=ControlConfig(completion_predicate=broken))
    result = await agent.run("1+2")
    assert result.answer == "3" and len(model.calls) == 2


# --- bad configuration ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("strictness_prior", "tight"),
        ("max_reasks", -1),
        ("max_answer_chars", 0),
        ("max_string_chars", 0),
        ("loose_window", 0),
        ("loose_failure_rate", 1.5),
        ("completion_predicate", "yes"),
    ],
)
def test_bad_ladder_settings_are_refused_by_name(name: str, value: Any) -> None:
    with pytest.raises(ConfigurationError, match=name):
        ControlConfig(**{name: value})


def test_an_agent_accepts_the_ladder_settings() -> None:
    config = ControlConfig(strictness_prior="reask", max_reasks=2)
    agent = Agent(scripted(final("x")), [add], control=config, runtime=Runtime(trace=False))
    assert agent.control.strictness_prior is Strictness.REASK


async def test_the_loose_record_is_a_bounded_window_and_needs_two_replies() -> None:
    from closedloop.agent._actuators import Controllers
    from closedloop.agent._control import ControllerBank

    store = MemoryStore()
    controllers = Controllers(ControllerBank(ControlConfig(loose_window=3), store))
    await controllers.note_loose("m", 1.0)
    assert await controllers.strictness_floor("m") is None  # one reply proves nothing
    await controllers.note_loose("m", 1.0)
    assert await controllers.strictness_floor("m") is Strictness.STRICT
    for _ in range(2):
        await controllers.note_loose("m", 0.0)
    record = await store.record_get("control", loose_key("m"))
    assert record is not None and list(record.value["errors"]) == [1.0, 0.0, 0.0]
    assert await controllers.strictness_floor("m") is None  # it answers loosely again
    assert await controllers.strictness_floor("other") is None
