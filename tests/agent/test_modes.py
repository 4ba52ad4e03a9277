"""Plan-and-execute and planner/executor/reviewer, plus phase rules in every mode."""

from __future__ import annotations

from typing import Any

from closedloop.agent import (
    ControlConfig,
    HaltReason,
    ModelReviewer,
    PlanExecute,
    PlanReview,
    RequiredField,
    ReviewRequest,
    ReviewVerdict,
    RunLimits,
    Runtime,
    Task,
    TaskState,
    stop_on_no_progress,
    stop_on_repeats,
    tool,
)
from closedloop.feedback import MemoryStore
from closedloop.models import CallInfo, FunctionModel, Message, ScriptedModel
from closedloop.perception import Observation

from .conftest import add, call, convert_temperature, final, make_agent, prompt_of, scripted


def _plan(*steps: tuple[str, dict[str, Any]], core: bool = True) -> dict[str, Any]:
    return {
        "plan": [{"tool": t, "arguments": a, "goal": f"run {t}", "core": core} for t, a in steps]
    }


async def test_plan_execute_calls_the_model_only_to_plan_and_to_answer() -> None:
    model = scripted(
        _plan(
            ("convert_temperature", {"value": 100, "from_unit": "celsius", "to_unit": "kelvin"}),
            ("add", {"a": 373.15, "b": 1}),
        ),
        final("374.15"),
    )
    store = MemoryStore()
    agent, _ = make_agent(
        model, [convert_temperature, add], mode="plan_execute", runtime=Runtime(store=store)
    )
    result = await agent.run(Task(prompt="100 C in kelvin, plus one", task_id="p1"))
    assert result.success and result.answer == "374.15"
    assert len(model.calls) == 2
    assert [r.phase for r in result.steps] == ["planning", "executing", "executing", "finishing"]
    assert [r.step_type for r in result.steps] == ["plan", "convert_temperature", "add", "final"]
    assert result.steps[2].observation is not None
    assert result.steps[2].observation["value"] == 374.15
    state = TaskState.model_validate((await store.get("p1")).to_dict())
    assert state.plan_version == 1 and state.cursor == 2
    assert [s.status for s in state.plan] == ["done", "done"]


@tool(fills={"total": ""})
def total_of(a: float, b: float) -> float:
    """The total of two numbers."""
    return a + b


async def test_a_plan_whose_last_step_completes_the_task_ends_without_a_final_call() -> None:
    model = scripted(
        _plan(("add", {"a": 1, "b": 2}), ("total_of", {"a": 3, "b": 4})), final("never asked")
    )
    agent, _ = make_agent(model, [add, total_of], mode="plan_execute")
    task = Task(
        prompt="1+2, then 3+4", required_fields=[RequiredField(name="total", source="total_of")]
    )
    result = await agent.run(task)
    assert len(model.calls) == 1  # the plan; the predicate holds after its last step
    assert result.halt_reason is HaltReason.FINAL and result.success and result.answer == "7.0"
    assert [r.phase for r in result.steps] == ["planning", "executing", "executing"]


async def test_a_plan_step_that_completes_the_fields_early_does_not_cut_the_plan_short() -> None:
    model = scripted(
        _plan(("total_of", {"a": 3, "b": 4}), ("add", {"a": 1, "b": 2})), final("never asked")
    )
    agent, _ = make_agent(model, [add, total_of], mode="plan_execute")
    task = Task(
        prompt="3+4, then 1+2", required_fields=[RequiredField(name="total", source="total_of")]
    )
    result = await agent.run(task)
    # the plan's second step still ran; the run ended after it, with the filled field
    assert [r.step_type for r in result.steps] == ["plan", "total_of", "add"]
    assert len(model.calls) == 1 and result.answer == "7.0"
    assert result.success and result.halt_reason is HaltReason.FINAL


async def test_an_invalid_plan_is_refused_and_the_model_sees_why() -> None:
    model = scripted(
        _plan(("teleport", {}), ("convert_temperature", {"value": 1, "from_unit": "x"})),
        _plan(("add", {"a": 1, "b": 2})),
        final("3"),
    )
    agent, _ = make_agent(model, [convert_temperature, add], mode="plan_execute")
    result = await agent.run("1+2")
    assert result.success
    errors = result.steps[0].validation_errors
    assert "plan[0]: unknown tool 'teleport'" in errors
    assert any(e.startswith("plan[1].arguments.from_unit: 'x' is not one of") for e in errors)
    assert any(e.startswith("plan[1].arguments: 'to_unit' is a required property") for e in errors)
    assert "plan[0]: unknown tool 'teleport'" in prompt_of(model, 1)


async def test_replans_are_counted_and_bounded() -> None:
    def lookup(key: str) -> list[str]:
        """Finds nothing, ever."""
        return []

    model = scripted(*(_plan(("lookup", {"key": f"k{i}"})) for i in range(5)), cycle=True)
    store = MemoryStore()
    agent, _ = make_agent(
        model,
        [lookup],
        mode=PlanExecute(max_replans=2),
        runtime=Runtime(store=store),
        limits=RunLimits(stop=stop_on_no_progress(50) | stop_on_repeats(2)),
    )
    result = await agent.run(Task(prompt="find it", task_id="p2"))
    assert result.halt_reason is HaltReason.NO_PROGRESS and not result.success
    assert "replan limit reached (2)" in " ".join(result.steps[-1].notes)
    state = TaskState.model_validate((await store.get("p2")).to_dict())
    assert state.replan_count == 3 and state.plan_version == 3
    assert len(model.calls) == 3  # one plan per attempt, nothing else
    assert "replanning (#1)" in prompt_of(model, 1)


async def test_the_reviewer_sends_a_step_back_until_it_is_complete() -> None:
    reviews: list[int] = []

    def reviewer(request: ReviewRequest) -> ReviewVerdict:
        reviews.append(request.observation.value)
        if request.observation.value < 10:
            return ReviewVerdict(False, "the sum must be at least 10")
        return ReviewVerdict(True)

    model = scripted(
        _plan(("add", {"a": 1, "b": 2})),
        call("add", a=1, b=2),  # the executor follows the plan: sent back
        call("add", a=5, b=6),  # the executor adjusts: complete
        final("11"),
    )
    agent, _ = make_agent(model, [add], mode=PlanReview(reviewer=reviewer))
    result = await agent.run("Find two numbers whose sum is at least 10.")
    assert result.success and result.answer == "11"
    assert reviews == [3.0, 11.0]
    assert "the reviewer sent plan step 0 back: the sum must be at least 10" in prompt_of(model, 2)
    assert "Execute plan step 0" in prompt_of(model, 1)
    assert [r.phase for r in result.steps] == ["planning", "executing", "executing", "finishing"]


async def test_too_many_sendbacks_trigger_a_replan() -> None:
    model = scripted(
        _plan(("add", {"a": 1, "b": 2})),
        call("add", a=1, b=2),
        call("add", a=1, b=3),
        _plan(("add", {"a": 9, "b": 9})),
        call("add", a=9, b=9),
        final("18"),
    )
    agent, _ = make_agent(
        model,
        [add],
        mode=PlanReview(max_sendbacks=1, reviewer=lambda request: request.observation.value > 10),
    )
    result = await agent.run("Sum above 10.")
    assert result.success and result.answer == "18"
    assert "was sent back 2 times" in " ".join(result.steps[2].notes)
    assert result.steps[3].phase == "planning"


async def test_a_model_can_be_the_reviewer() -> None:
    verdicts = ScriptedModel(
        [{"complete": False, "reason": "too small"}, {"complete": True, "reason": "fine"}],
        name="reviewer",
    )
    model = scripted(
        _plan(("add", {"a": 1, "b": 1})), call("add", a=1, b=1), call("add", a=4, b=4), final("8")
    )
    agent, _ = make_agent(model, [add], mode=PlanReview(reviewer=ModelReviewer(verdicts)))
    result = await agent.run("Make it big enough.")
    assert result.success
    assert len(verdicts.calls) == 2 and verdicts.calls[0].response_schema is not None
    assert "<data>" in verdicts.calls[0].messages[-1].content
    assert "sent plan step 0 back: too small" in prompt_of(model, 2)


async def test_dimension_reduction_skips_non_core_plan_steps() -> None:
    drawn: list[str] = []

    def sensor(n: int) -> Observation:
        """A poorly trusted sensor."""
        return Observation.ok({"n": n}, source="sensor", confidence=0.3)

    @tool(core=False)
    def draw(title: str) -> str:
        """Decorate the report."""
        drawn.append(title)
        return "ok"

    model = scripted(_plan(("sensor", {"n": 1}), ("draw", {"title": "t"})), final("n=1"))
    config = ControlConfig(
        eso_min_samples=1, protocol_thresholds=(0.1, 0.2, 0.99), hysteresis=0.0, protocol_dwell=0
    )
    agent, _ = make_agent(model, [sensor, draw], mode="plan_execute", control=config)
    result = await agent.run("Read and draw.")
    assert drawn == [] and result.success
    assert "skipped non-core plan step 1 (draw)" in result.steps[2].notes[0]


async def test_a_phase_forbidden_action_is_refused_with_a_reason() -> None:
    sent: list[str] = []

    @tool(phases=("committing",))
    def send_confirmation(to: str) -> str:
        """Send the confirmation (only once everything is known)."""
        sent.append(to)
        return "sent"

    @tool(fills={"email": "email"})
    def lookup_guest(name: str) -> dict[str, str]:
        """Look the guest up."""
        return {"name": name, "email": "a@b.c"}

    def reply(messages: tuple[Message, ...], info: CallInfo) -> dict[str, Any]:
        text = messages[-1].content
        if "phase: collecting" in text and "step 1 of" in text:
            return call("send_confirmation", to="a@b.c")  # too early
        if "phase: collecting" in text:
            return call("lookup_guest", name="Ana")
        return call("send_confirmation", to="a@b.c")

    task = Task(prompt="Confirm to the guest.", required_fields=["email"])
    model = FunctionModel(reply)
    agent, _ = make_agent(model, [send_confirmation, lookup_guest], limits=RunLimits(max_steps=3))
    result = await agent.run(task)
    refused = result.steps[0]
    assert refused.validation_errors == [
        "tool 'send_confirmation' may run only in phase(s) committing; the task is in phase "
        "'collecting'"
    ]
    assert "may run only in phase(s) committing" in prompt_of(model, 1)
    assert result.fields == {"email": "a@b.c"}  # filled from the lookup's answer
    assert result.steps[2].phase == "committing" and sent == ["a@b.c"]


async def test_plan_modes_refuse_tools_while_finishing() -> None:
    model = scripted(_plan(("add", {"a": 1, "b": 1})), call("add", a=5, b=5), final("2"))
    agent, _ = make_agent(model, [add], mode=PlanExecute(max_replans=0))
    result = await agent.run("1+1")
    finishing = result.steps[2]
    assert finishing.phase == "finishing"
    assert (
        "phase 'finishing' does not allow a tool action here; allowed: final"
        in (finishing.validation_errors[0])
    )
    assert result.halt_reason is HaltReason.NO_PROGRESS  # no replan left
