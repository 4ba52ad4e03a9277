"""Ideal trajectories against a real world: played directly, played through the real loop by
a scripted model, and the negative side: wrong answers, duplicate effects and invented
answers to impossible tasks are failures."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from closedloop import Runtime
from closedloop.agent import (
    Agent,
    ControlConfig,
    HaltReason,
    RunLimits,
    stop_on_no_progress,
    stop_on_repeats,
)
from closedloop.feedback import MemoryStore
from closedloop_bench.reference import (
    Answer,
    ReferenceTask,
    WorldTools,
    check,
    ideal_model,
    load_tasks,
    play_ideal,
)
from closedloop_bench.world import EndpointFaults, WorldHandle

from .conftest import ServeFaults

DEV = load_tasks("dev")
EVAL = load_tasks("eval")


def _one_per_cell(tasks: tuple[ReferenceTask, ...]) -> list[ReferenceTask]:
    """One task per (domain, expected steps, possible or not), in task order."""
    picked: dict[tuple[str, int, bool], ReferenceTask] = {}
    for t in tasks:
        picked.setdefault((t.domain, t.expected_steps, t.impossible), t)
    return list(picked.values())


def _one_per_template(tasks: tuple[ReferenceTask, ...], impossible: bool) -> list[ReferenceTask]:
    picked: dict[str, ReferenceTask] = {}
    for t in tasks:
        if t.impossible == impossible:
            picked.setdefault(t.template, t)
    return list(picked.values())


@pytest.mark.parametrize("split", ["dev", "eval"])
async def test_every_ideal_trajectory_succeeds_on_a_real_world(
    split: str, world: WorldHandle
) -> None:
    failures = []
    async with WorldTools(world.base_url) as tools:
        for task in load_tasks(split):  # type: ignore[arg-type]
            world.reset()
            tools.clear_journal()
            answer, observations = await play_ideal(task, tools)
            verdict = check(task, answer, world)
            if not verdict.success:
                failures.append((task.id, verdict.reason))
            assert len(observations) == task.expected_steps
    assert failures == []


@pytest.mark.parametrize("task", _one_per_cell(DEV) + _one_per_cell(EVAL), ids=lambda t: t.id)
async def test_the_loop_plays_the_ideal_trajectory_and_the_checker_agrees(
    task: ReferenceTask, world: WorldHandle
) -> None:
    store = MemoryStore()
    async with WorldTools(world.base_url, store=store) as tools:
        agent = Agent(
            ideal_model(task, tools),
            tools.tools(task.domain),
            control=ControlConfig(protocols=False),
            limits=RunLimits(
                max_steps=task.expected_steps + 2,
                stop=stop_on_no_progress(task.expected_steps + 1) | stop_on_repeats(2),
            ),
            runtime=Runtime(store=store, trace=False),
        )
        result = await agent.run(task.agent_task())
    assert result.halt_reason is HaltReason.FINAL and result.success, result.message
    assert [s.action.tool for s in result.steps if s.action] == [
        c.tool for c in task.ideal_trajectory
    ]
    verdict = check(task, result, world)
    assert verdict.success, verdict.reason
    # Effects went out under the loop's own ledger keys.
    assert all(e.idempotency_key.startswith(f"{result.task_id}/") for e in world.effects)  # type: ignore[union-attr]


# --- the negative side --------------------------------------------------------------------------


def _perturb(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 7
    if isinstance(value, str):
        if re.fullmatch(r"\d{2}:00", value):
            return f"{(int(value[:2]) + 1) % 24:02d}:00"
        digits = [i for i, ch in enumerate(value) if ch.isdigit()]
        if digits:  # another date, flight, quarter: one digit off
            i = digits[-1]
            return value[:i] + str((int(value[i]) + 1) % 10) + value[i + 1 :]
        return f"X{value}"
    if isinstance(value, list):
        return [*value, "08:00"] if not value or isinstance(value[0], str) else value[:-1]
    if isinstance(value, dict):
        return {k: _perturb(v) for k, v in value.items()}
    raise AssertionError(value)


async def _played(task: ReferenceTask, world: WorldHandle) -> Answer:
    world.reset()
    async with WorldTools(world.base_url) as tools:
        answer, _ = await play_ideal(task, tools)
    return answer


@pytest.mark.parametrize("task", _one_per_template(DEV, impossible=False), ids=lambda t: t.id)
async def test_a_wrong_value_in_any_answer_field_fails(
    task: ReferenceTask, world: WorldHandle
) -> None:
    answer = await _played(task, world)
    assert check(task, answer, world).success
    for name, value in answer.fields.items():
        if name in ("status", "outline"):
            continue
        wrong = answer.model_copy(update={"fields": {**answer.fields, name: _perturb(value)}})
        assert not check(task, wrong, world).success, (name, value)
    for bad in (
        Answer(fields={"status": "impossible", "reason": "cannot"}),
        Answer(handed_over=True),
        Answer(),
    ):
        assert not check(task, bad, world).success


@pytest.mark.parametrize("task", _one_per_template(DEV, impossible=True), ids=lambda t: t.id)
async def test_impossible_tasks_fail_on_invented_answers_and_pass_on_honesty(
    task: ReferenceTask, world: WorldHandle
) -> None:
    answer = await _played(task, world)
    assert check(task, answer, world).success
    assert check(task, Answer(handed_over=True), world).success
    assert check(task, Answer(text="抱歉，无法完成：查不到这个。"), world).success
    invented = {
        "status": "answered",
        **{k: 1 for k in task.required_fields["properties"] if k not in ("status", "reason")},
    }
    assert not check(task, Answer(fields=invented), world).success
    assert not check(task, Answer(text="明天25°C，晴，已为您订好。"), world).success
    assert not check(task, Answer(text=""), world).success


def _task(template: str) -> ReferenceTask:
    return next(t for t in DEV if t.template == template and not t.impossible)


async def test_a_duplicate_payment_fails_the_booking_task(world: WorldHandle) -> None:
    task = _task("flight_book")
    answer = await _played(task, world)
    assert check(task, answer, world).success
    booking = next(iter(world.world.bookings.values()))
    async with httpx.AsyncClient() as client:  # a second charge, as a keyless retry would make
        reply = await client.post(f"{world.base_url}/payments", json={"order_id": booking.order_id})
    assert reply.status_code == 201
    verdict = check(task, answer, world)
    assert not verdict.success and "2 payments" in verdict.reason


async def test_wrong_missing_or_extra_effects_fail_the_booking_task(world: WorldHandle) -> None:
    task = _task("flight_book")
    flight_id, passenger = task.ideal_trajectory[-2].arguments.values()
    answer = task.ideal_answer
    async with WorldTools(world.base_url) as tools:
        world.reset()
        await tools.book_flight(flight_id, passenger)  # booked, never paid
        assert "0 payments" in check(task, answer, world).reason
        world.reset()
        await play_ideal(task, tools)
        await tools.book_flight(flight_id, "Someone Else")  # a second live booking
        assert "2 live bookings" in check(task, answer, world).reason
    assert "needs the world" in check(task, answer, None).reason


async def test_a_room_booked_twice_or_a_read_task_that_books_fails(world: WorldHandle) -> None:
    task = _task("room_book")
    answer = await _played(task, world)
    args = dict(task.ideal_trajectory[-1].arguments)
    async with WorldTools(world.base_url) as tools:
        slots = await tools.get_room_slots(args["room_id"], args["date"])
        other = next(x["start"] for x in slots.value["free_slots"] if x["start"] != args["slot"])
        await tools.book_room(**{**args, "slot": other})
        assert not check(task, answer, world).success
        reader = _task("weather_single")
        read_answer = await _played(reader, world)
        await tools.book_room(**args)
    verdict = check(reader, read_answer, world)
    assert not verdict.success and "read-only" in verdict.reason


async def test_an_impossible_task_that_acts_fails_even_if_it_says_so(world: WorldHandle) -> None:
    task = next(t for t in DEV if t.impossible and t.template == "flight_book_budget")
    world.reset()
    async with WorldTools(world.base_url) as tools:
        search = task.ideal_trajectory[0].arguments
        found = await tools.search_flights(**search)
        flight = found.value["flights"][0]
        await tools.book_flight(flight["flight_id"], "张伟")
    verdict = check(task, task.ideal_answer, world)
    assert not verdict.success and "acted" in verdict.reason


def test_text_only_answers_are_read_when_no_fields_are_given() -> None:
    task = _task("weather_single")
    t = task.ground_truth
    good = Answer(text=f"{t['city']}：{t['condition_zh']}，{t['temperature_c']}°C")
    assert check(task, good).success
    bad = Answer(text=f"{t['city']}：{t['condition_zh']}，{t['temperature_c'] + 3}°C")
    assert not check(task, bad).success


_ANY_JSON = st.recursive(
    st.none() | st.booleans() | st.floats(allow_nan=False) | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.sampled_from([*_one_per_template(DEV, False), *_one_per_template(DEV, True)]),
    st.dictionaries(st.text(max_size=12), _ANY_JSON, max_size=5),
    st.text(max_size=40),
    st.booleans(),
)
def test_checkers_never_crash_and_never_credit_an_invented_answer(
    task: ReferenceTask, fields: dict[str, Any], text: str, handed_over: bool
) -> None:
    answer = Answer(fields=fields, text=text, handed_over=handed_over)
    verdict = check(task, answer)
    assert isinstance(verdict.reason, str) and verdict.reason
    if task.impossible and fields.get("status") == "answered":
        assert not verdict.success
    if not task.impossible and handed_over:
        assert not verdict.success


async def test_through_the_loop_lost_answers_are_reconciled_not_repeated(
    serve_faults: ServeFaults,
) -> None:
    # Every booking and every payment is made, then its answer is replaced by a 503.
    lost = EndpointFaults(commit_then_fail_rate=1.0)
    task = _task("flight_book")
    store = MemoryStore()
    with serve_faults({"bookings_create": lost, "payments_create": lost}) as world:
        async with WorldTools(world.base_url, store=store) as tools:
            agent = Agent(
                ideal_model(task, tools),
                tools.tools(task.domain),
                control=ControlConfig(protocols=False),
                limits=RunLimits(max_steps=task.expected_steps + 2),
                runtime=Runtime(store=store, trace=False),
            )
            result = await agent.run(task.agent_task())
        assert result.success, result.message
        assert world.counters["bookings_create"].commit_then_fail == 1
        assert world.counters["payments_create"].commit_then_fail == 1
        verdict = check(task, result, world)
        assert verdict.success, verdict.reason  # one booking, one payment: nothing repeated
