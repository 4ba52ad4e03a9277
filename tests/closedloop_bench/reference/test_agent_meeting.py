"""The meeting-room agent against a real world server: the tasks' checkers under no faults
and seed000's, the empty-result guard, the weather check, grounded answers, bad input."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from closedloop.agent import HaltReason
from closedloop_bench.reference import ReferenceTask, check, load_tasks
from closedloop_bench.reference._agents_common import Move, Turn, call, final
from closedloop_bench.reference.meeting import MeetingRules, build_meeting_agent, slot_seen_free
from closedloop_bench.world import EndpointFaults, WorldHandle, serve_world

MEETINGS = [t for t in load_tasks("eval") if t.domain == "meeting"]


async def no_wait(seconds: float) -> None:
    """Retry delays pass at once; the loop's deadline watcher (a long sleep) never fires."""
    if seconds > 30:
        await asyncio.Event().wait()


@pytest.fixture(scope="module")
def faulty() -> Iterator[WorldHandle]:
    with serve_world("seed000", latency_scale=0.0) as handle:
        yield handle


async def _run_all(
    world: WorldHandle, tasks: Sequence[ReferenceTask], injected: list[int] | None = None
) -> float:
    """The share of ``tasks`` the checkers pass; ``injected`` collects the errors injected."""
    ok = 0
    async with build_meeting_agent(None, base_url=world.base_url, sleep=no_wait) as agent:
        for index, task in enumerate(tasks):
            world.reset(fault_seed=index)
            result = await agent.run(task)
            ok += check(task, result, world).success
            if injected is not None:
                injected.append(len(world.faults(kind="error")))
            made = world.counters.get("room_bookings_create")
            assert made is None or made.duplicates == 0
    return ok / len(tasks)


async def test_meeting_tasks_succeed_on_a_clean_world(world: WorldHandle) -> None:
    assert await _run_all(world, MEETINGS[::2]) >= 0.97  # measured 98/98 on the split


async def test_seed000_faults_are_absorbed(faulty: WorldHandle) -> None:
    injected: list[int] = []
    assert await _run_all(faulty, MEETINGS[1::2], injected) >= 0.95  # measured 97-98/98
    assert sum(injected) >= 10


def test_the_guard_refuses_a_slot_no_answer_showed_free() -> None:
    args = {"room_id": "room-3", "date": "2025-06-05", "slot": "14:00"}
    free = {"start": "14:00", "end": "15:00"}
    seen = {
        "status": "ok",
        "value": {"room_id": "room-3", "date": "2025-06-05", "free_slots": [free]},
    }
    assert slot_seen_free(args, {"latest": {"get_room_slots": seen}}) is True
    empty = {
        "status": "empty",
        "value": {"room_id": "room-3", "date": "2025-06-05", "free_slots": []},
    }
    for latest in ({}, {"get_room_slots": empty}):
        assert "no match" in str(slot_seen_free(args, {"latest": latest}))
    other = {**seen, "value": {**seen["value"], "room_id": "room-4"}}
    assert "another room" in str(slot_seen_free(args, {"latest": {"get_room_slots": other}}))
    taken = {**seen, "value": {**seen["value"], "free_slots": [{"start": "15:00"}]}}
    assert "not among" in str(slot_seen_free(args, {"latest": {"get_room_slots": taken}}))


class _Reckless(MeetingRules):
    """Rules that book right after asking, whatever the answer was (what the guard is for)."""

    async def decide(self, turn: Turn) -> Move:
        args = {"room_id": "room-3", "date": "2025-06-05"}
        if turn.facts.seen("get_room_slots", **args) is None:
            return call("get_room_slots", **args)
        if turn.facts.seen("book_room", slot="14:00", organizer="x", **args) is None:
            return call("book_room", slot="14:00", organizer="x", **args)
        return final("booked", room_id="room-3", date="2025-06-05", slot="14:00")


async def test_an_empty_availability_answer_never_licenses_a_booking(serve_faults: Any) -> None:
    from closedloop_bench.reference._agents_common import ReferenceAgent

    with serve_faults({"room_slots": EndpointFaults(empty_rate=1.0)}) as world:
        async with ReferenceAgent(
            _Reckless, None, base_url=world.base_url, domain="meeting", sleep=no_wait
        ) as agent:
            result = await agent.run("Book room-3 on 2025-06-05 at 14:00.")
        tried = [s for s in result.steps if s.action and s.action.tool == "book_room"]
        assert tried and all(s.observation is None for s in tried)  # never executed
        refusals = [" ".join(s.validation_errors) for s in tried if s.validation_errors]
        assert refusals and all("empty answer is not" in r for r in refusals)
        assert not world.world.effects()
    # Repeated refusals are a disturbance the ESO sees: the task is frozen for a person.
    assert result.halt_reason is HaltReason.HANDOVER and not result.success


async def test_an_empty_room_list_is_no_match_not_any_room(world: WorldHandle) -> None:
    prompt = (
        "Bob Li needs a room for 100 people with a 3d printer on June 5 at 10:00 for one hour. "
        "Find one and book it."
    )
    async with build_meeting_agent(None, base_url=world.base_url, sleep=no_wait) as agent:
        result = await agent.run(prompt)
    assert result.fields["answer"]["status"] == "impossible"
    assert [s.step_type for s in result.steps] == ["list_rooms", "final"]
    assert not world.world.effects()


async def test_rain_books_once_and_dry_weather_books_nothing(world: WorldHandle) -> None:
    tasks = [t for t in MEETINGS if t.template == "weather_conditional_room"]
    rainy = next(t for t in tasks if t.ground_truth["booked"])
    dry = next(t for t in tasks if not t.ground_truth["booked"])
    async with build_meeting_agent(None, base_url=world.base_url, sleep=no_wait) as agent:
        for task, bookings in ((rainy, 1), (dry, 0)):
            world.reset()
            result = await agent.run(task)
            assert check(task, result, world).success
            assert len(world.world.effects("room_bookings_create")) == bookings
            tools = [s.action.tool for s in result.steps if s.action]
            assert next(t for t in tools if t != "list_cities") == "get_weather"  # checked first
            assert ("book_room" in tools) is bool(bookings)


@pytest.mark.parametrize(
    ("prompt", "says"),
    [
        ("以张伟的名义订三号会议室，6月7日上午10点开一小时会。", "room-3"),  # a Saturday: closed
        ("Is Room 2 (room-2) free on 2030-01-01 at 10:00?", "2030-01-01"),
        ("查一下6月5日火星城的天气，顺便看看一号会议室空不空，列出空闲时段。", "火星城"),
    ],
)
async def test_bad_input_is_answered_as_impossible(
    world: WorldHandle, prompt: str, says: str
) -> None:
    async with build_meeting_agent(None, base_url=world.base_url, sleep=no_wait) as agent:
        result = await agent.run(prompt)
    answer = result.fields["answer"]
    assert answer["status"] == "impossible" and says in answer["reason"], answer
    assert not world.world.effects()


async def test_impossible_tasks_of_the_split_are_never_acted_on(world: WorldHandle) -> None:
    bad = [t for t in MEETINGS if t.impossible]
    assert bad and await _run_all(world, bad) == 1.0
