"""The flight agent against a real world server: the tasks' checkers under no faults and
the seed000 profile's, effects never duplicated when answers are lost, compensation when payment
fails, the hybrid controller's budget decisions, and bad input."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from closedloop.agent import HaltReason, RunResult
from closedloop.feedback import HandoverQueue, MemoryStore
from closedloop_bench.reference import ReferenceTask, check, load_tasks
from closedloop_bench.reference.flight import build_flight_agent, price_tolerance
from closedloop_bench.world import EndpointFaults, WorldHandle, load_world, serve_world

FLIGHTS = [t for t in load_tasks("eval") if t.domain == "flight"]
BOOKINGS = [t for t in FLIGHTS if "effect" in t.tags and not t.impossible]


async def no_wait(seconds: float) -> None:
    """Retry delays pass at once; the loop's deadline watcher (a long sleep) never fires."""
    if seconds > 30:
        await asyncio.Event().wait()


@pytest.fixture(scope="module")
def faulty() -> Iterator[WorldHandle]:
    with serve_world("seed000", latency_scale=0.0) as handle:
        yield handle


def _no_duplicates(world: WorldHandle) -> None:
    for name in ("bookings_create", "payments_create"):
        counters = world.counters.get(name)
        assert counters is None or counters.duplicates == 0, (name, counters)


async def _run_all(
    world: WorldHandle,
    tasks: Sequence[ReferenceTask],
    injected: list[int] | None = None,
    **options: Any,
) -> float:
    """The share of ``tasks`` the checkers pass; ``injected`` collects the errors injected."""
    ok = 0
    async with build_flight_agent(None, base_url=world.base_url, sleep=no_wait, **options) as agent:
        for index, task in enumerate(tasks):
            world.reset(fault_seed=index)
            result = await agent.run(task)
            ok += check(task, result, world).success
            if injected is not None:
                injected.append(len(world.faults(kind="error")))
            _no_duplicates(world)
            assert all(e.idempotency_key for e in world.effects)
    return ok / len(tasks)


async def test_most_flight_tasks_succeed_on_a_clean_world(world: WorldHandle) -> None:
    # Measured: 99/100 of the evaluation split; the miss is a homophone (背景) that only a
    # person can confirm.
    assert await _run_all(world, FLIGHTS[::2]) >= 0.95


async def test_seed000_faults_are_absorbed_and_no_effect_is_duplicated(
    faulty: WorldHandle,
) -> None:
    injected: list[int] = []
    assert await _run_all(faulty, FLIGHTS[1::2], injected) >= 0.95  # measured 99/100
    assert sum(injected) >= 10


async def test_lost_answers_to_bookings_and_payments_never_book_or_charge_twice(
    serve_faults: Any,
) -> None:
    # The world commits, then answers 503: the ledger's reconciler asks the world what
    # happened, and a retry goes out under the same idempotency key.
    faults = {
        "bookings_create": EndpointFaults(commit_then_fail_rate=0.6),
        "payments_create": EndpointFaults(commit_then_fail_rate=0.6),
    }
    with serve_faults(faults) as world:
        assert await _run_all(world, BOOKINGS[:8]) == 1.0
        assert world.counters["payments_create"].calls >= 1


async def test_a_payment_that_keeps_failing_is_compensated_and_handed_over(
    serve_faults: Any,
) -> None:
    task = BOOKINGS[0]
    store = MemoryStore()
    with serve_faults({"payments_create": EndpointFaults(error_rate=1.0)}) as world:
        async with build_flight_agent(
            None, base_url=world.base_url, store=store, sleep=no_wait
        ) as agent:
            result = await agent.run(task)
        tools = [s.action.tool for s in result.steps if s.action]
        assert result.halt_reason is HaltReason.HANDOVER
        assert tools[-3:] == ["pay", "cancel_booking", "ask_human"]
        assert all(b.status == "cancelled" for b in world.world.bookings.values())
        assert not [p for p in world.world.payments.values() if p.status == "succeeded"]
        assert not check(task, result, world).success  # honest: nothing was bought
    assert result.handover_id is not None
    item = await HandoverQueue(store).get(result.handover_id)
    assert "payment failed" in item.audit["pending_action"]["arguments"]["question"]


def _near_miss() -> tuple[str, str, str, int, int]:
    """A route and day whose cheapest fare is just above a budget that the next day meets."""
    data = load_world(0)
    names = {c.code: c.name for c in data.cities}
    fares: dict[tuple[str, str, dt.date], list[int]] = {}
    for f in data.flights:
        if f.seats > 0:
            fares.setdefault((f.origin, f.destination, f.date), []).append(f.price_cny)
    for (a, b, day), prices in sorted(fares.items()):
        nxt = fares.get((a, b, day + dt.timedelta(days=1)))
        if day >= data.today and nxt and min(nxt) <= min(prices) - 40:
            return names[a], names[b], day.isoformat(), min(prices), min(prices) - 30
    raise AssertionError("no near miss in the data")


async def _search_days(world: WorldHandle, prompt: str) -> tuple[RunResult, list[str]]:
    async with build_flight_agent(None, base_url=world.base_url, sleep=no_wait) as agent:
        result = await agent.run(prompt)
    days = [
        str(s.action.arguments["date"])
        for s in result.steps
        if s.action and s.action.tool == "search_flights"
    ]
    return result, days


async def test_a_near_miss_widens_the_dates_but_books_nothing(world: WorldHandle) -> None:
    origin, dest, day, fare, budget = _near_miss()
    assert fare - budget <= price_tolerance(budget)
    prompt = (
        f"我要从{origin}飞{dest}，{day}出发，预算{budget}元以内（要有余票）。"
        f"只看{day}当天。帮张伟订下来并付款。"
    )
    result, days = await _search_days(world, prompt)
    answer = result.fields["answer"]
    assert answer["status"] == "impossible" and "未预订" in answer["reason"]
    assert days[0] == day and len(days) > 1  # the hybrid controller's widen_dates rule
    assert not world.world.effects()


async def test_a_far_miss_concludes_without_widening(world: WorldHandle) -> None:
    origin, dest, day, fare, _ = _near_miss()
    budget = fare - 600  # gap 600 > max(50, 0.1 x budget)
    prompt = (
        f"I need a flight from {origin} to {dest} within {budget} CNY (with seats left), "
        f"only {day}. Take the earliest date with such a flight, its cheapest one, and book "
        "it for Bob Li and pay."
    )
    result, days = await _search_days(world, prompt)
    assert result.fields["answer"]["status"] == "impossible"
    assert days == [day]
    assert not world.world.effects()


@pytest.mark.parametrize(
    ("prompt", "says"),
    [
        ("Find me the cheapest flight from Atlantis to Beijing tomorrow.", "Atlantis"),
        ("帮我查昨天从北京飞上海最便宜的航班。", "2025-06-01"),
        ("帮我查2030-01-01从北京飞上海最便宜的航班。", "2030-01-01"),
        ("帮我查6月31日从北京飞上海最便宜的航班。", "2025-06-31"),
    ],
)
async def test_bad_input_is_answered_as_impossible(
    world: WorldHandle, prompt: str, says: str
) -> None:
    async with build_flight_agent(None, base_url=world.base_url, sleep=no_wait) as agent:
        result = await agent.run(prompt)
    answer = result.fields["answer"]
    assert answer["status"] == "impossible" and says in answer["reason"], answer
    assert not world.world.effects()


async def test_impossible_tasks_of_the_split_are_never_answered_or_acted_on(
    world: WorldHandle,
) -> None:
    bad = [t for t in FLIGHTS if t.impossible]
    assert bad and await _run_all(world, bad) == 1.0
