"""World tools against a real world server: observations, schemas, keys and contracts."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from closedloop import ActionError, ConfigurationError, ReconciliationRequiredError, ToolError
from closedloop.agent._tools import tools_by_name
from closedloop.execution import (
    AtomicAction,
    EffectClass,
    EffectLedger,
    EffectStatus,
    Executor,
    OutcomeStatus,
    RetryPolicy,
    StopAfterAttempt,
)
from closedloop.feedback import MemoryStore
from closedloop.perception import ObservationStatus
from closedloop_bench.reference import DOMAIN_TOOLS, WorldTools, observed_value
from closedloop_bench.world import EndpointFaults, WorldHandle, load_world

from .conftest import ServeFaults

DATA = load_world(0)
DAY = "2025-06-05"


def _cheapest(flights: list[dict[str, Any]]) -> dict[str, Any]:
    return min((f for f in flights if f["seats_left"] > 0), key=lambda f: f["price_cny"])


# --- reads ----------------------------------------------------------------------------------


async def test_reads_score_answers_and_explain_refusals(tools: WorldTools) -> None:
    weather = await tools.get_weather("北京", DAY)
    truth = next(w for w in DATA.weather if w.city == "北京" and w.date.isoformat() == DAY)
    assert weather.status is ObservationStatus.OK
    assert weather.value["temperature_c"] == truth.temperature_c

    unknown = await tools.get_weather("拉萨", DAY)
    assert unknown.status is ObservationStatus.ERROR and unknown.confidence == 0.0
    assert unknown.value["error"] == "unknown_city"  # the reason survives for rules
    assert "unknown_city" in unknown.meaning and "not a passing fault" in unknown.meaning

    no_route = await tools.search_flights("南京", "武汉", DAY)
    assert no_route.status is ObservationStatus.EMPTY
    assert "not the absence of a constraint" in no_route.meaning

    past = await tools.search_flights("北京", "上海", "2025-05-01")
    assert past.value["error"] == "date_in_past"

    closed = await tools.get_room_slots("room-3", "2025-06-07")  # a Saturday
    assert closed.status is ObservationStatus.EMPTY and closed.value["open"] is False
    assert [r.tool for r in tools.journal][-1] == "get_room_slots"


async def test_optional_arguments_left_out_are_not_sent(tools: WorldTools, world: Any) -> None:
    rooms = await tools.list_rooms(capacity=10)
    assert rooms.status is ObservationStatus.OK
    assert {r["room_id"] for r in rooms.value["rooms"]} == {
        r.room_id for r in DATA.rooms if r.capacity >= 10
    }
    docs = await tools.search_documents(company="华辰科技")
    assert docs.value["count"] == 8


async def test_drift_inside_list_items_makes_the_answer_partial(serve_faults: ServeFaults) -> None:
    with serve_faults({"flights": EndpointFaults(drift_rate=1.0)}) as world:
        async with WorldTools(world.base_url) as kit:
            drifted = await kit.search_flights("北京", "上海", DAY)
    assert drifted.status is ObservationStatus.PARTIAL
    assert "flights[].price_cny" in (drifted.error or "")


def test_tool_schemas_come_from_signatures_and_docstrings() -> None:
    kit = WorldTools("http://127.0.0.1:9")
    schemas = tools_by_name(kit.tools())
    assert set(schemas) == {n for names in DOMAIN_TOOLS.values() for n in names} | {"get_payment"}
    weather = schemas["get_weather"].parameters
    assert weather["required"] == ["city"]
    assert "YYYY-MM-DD" in weather["properties"]["date"]["description"]
    pay = schemas["pay"]
    assert pay.effect is EffectClass.IRREVERSIBLE
    assert pay.parameters["properties"]["amount_cny"]["type"] == "integer"
    for name in ("book_flight", "book_room", "create_order"):
        assert schemas[name].effect is EffectClass.ONCE
        assert schemas[name].action.compensation is not None
        assert schemas[name].action.reconciler is not None
    for domain, names in DOMAIN_TOOLS.items():
        assert [tools_by_name([t]).popitem()[0] for t in kit.tools(domain)] == list(names)  # type: ignore[arg-type]


def test_bad_configuration_names_the_argument() -> None:
    with pytest.raises(ConfigurationError, match="base_url"):
        WorldTools("ftp://nowhere")
    with pytest.raises(ConfigurationError, match="domain"):
        WorldTools("http://127.0.0.1:9").tools("shopping")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="no such tool"):
        WorldTools("http://127.0.0.1:9").tool("teleport")


# --- effects through the executor and the ledger ------------------------------------------------


async def _book_and_pay(kit: WorldTools, executor: Executor, task_id: str) -> tuple[Any, Any]:
    found = await kit.search_flights("北京", "上海", DAY)
    flight = _cheapest(found.value["flights"])
    booked = await executor.execute(
        kit.actions["book_flight"],
        {"flight_id": flight["flight_id"], "passenger": "张伟"},
        task_id=task_id,
        step=1,
    )
    assert booked.status is OutcomeStatus.SUCCEEDED, booked.error
    paid = await executor.execute(
        kit.actions["pay"],
        {"order_id": observed_value(booked.result)["order_id"], "amount_cny": flight["price_cny"]},
        task_id=task_id,
        step=2,
    )
    return booked, paid


async def test_idempotency_key_is_the_ledger_key(
    tools: WorldTools, store: MemoryStore, world: WorldHandle
) -> None:
    executor = Executor(EffectLedger(store))
    booked, paid = await _book_and_pay(tools, executor, "t-keys")
    assert paid.status is OutcomeStatus.SUCCEEDED
    sent = {e.endpoint: e.idempotency_key for e in world.effects}
    assert sent == {"bookings_create": booked.effect_key, "payments_create": paid.effect_key}
    assert world.counters["payments_create"].missing_idempotency_key == 0


async def test_without_a_ledger_a_retry_reuses_its_key(world: WorldHandle) -> None:
    async with WorldTools(world.base_url, session="s1") as kit:
        flight = _cheapest((await kit.search_flights("上海", "广州", DAY)).value["flights"])
        args = {"flight_id": flight["flight_id"], "passenger": "Bob Li"}
        first = await kit.book_flight(**args)
        again = await kit.book_flight(**args)  # same call, same key: the world replays
    assert first.value == again.value
    assert world.counters["bookings_create"].effects == 1
    assert world.counters["bookings_create"].replays == 1


async def test_paying_twice_on_two_steps_is_stopped_by_the_world_check(
    tools: WorldTools, store: MemoryStore, world: WorldHandle
) -> None:
    executor = Executor(EffectLedger(store))
    booked, paid = await _book_and_pay(tools, executor, "t-dup")
    assert paid.status is OutcomeStatus.SUCCEEDED
    again = await executor.execute(
        tools.actions["pay"],
        {"order_id": observed_value(booked.result)["order_id"], "amount_cny": 1},
        task_id="t-dup",
        step=3,  # another step: another ledger key, so only the world can tell
    )
    assert again.status is OutcomeStatus.PRECONDITION_FAILED
    assert "already paid" in str(again.error)
    rebook = await executor.execute(
        tools.actions["book_flight"],
        {"flight_id": observed_value(booked.result)["flight_id"], "passenger": "张伟"},
        task_id="t-dup",
        step=4,
    )
    assert rebook.status is OutcomeStatus.PRECONDITION_FAILED
    assert world.counters["payments_create"].effects == 1
    assert world.counters["bookings_create"].effects == 1


async def test_a_refusal_is_final_and_recorded_as_not_applied(
    tools: WorldTools, store: MemoryStore, world: WorldHandle
) -> None:
    ledger = EffectLedger(store)
    outcome = await Executor(ledger).execute(
        tools.actions["book_flight"],
        {"flight_id": "XX0000-20250605", "passenger": "张伟"},
        task_id="t-refused",
        step=0,
    )
    assert outcome.status is OutcomeStatus.FAILED
    assert isinstance(outcome.error, ToolError) and "unknown_flight" in str(outcome.error)
    record = await ledger.get(outcome.effect_key or "")
    assert record is not None and record.status is EffectStatus.FAILED
    assert world.effects == ()


async def test_commit_then_fail_is_reconciled_not_repeated(serve_faults: ServeFaults) -> None:
    store = MemoryStore()
    faults = {"payments_create": EndpointFaults(commit_then_fail_rate=1.0)}
    with serve_faults(faults) as world:
        async with WorldTools(world.base_url, store=store) as kit:
            executor = Executor(EffectLedger(store))
            booked, paid = await _book_and_pay(kit, executor, "t-ctf")
        assert paid.status is OutcomeStatus.SUCCEEDED, paid.error
        # The reconciler's answer (from GET /orders), as the ledger stored it.
        assert "lost" in paid.result["meaning"]
        assert observed_value(paid.result)["status"] == "succeeded"
        assert world.counters["payments_create"].effects == 1
        assert world.counters["payments_create"].commit_then_fail == 1
        order = world.world.orders[observed_value(booked.result)["order_id"]]
        assert order.status == "paid"


async def test_a_lost_request_is_reconciled_as_not_applied(serve_faults: ServeFaults) -> None:
    store = MemoryStore()
    with serve_faults({"bookings_create": EndpointFaults(error_rate=1.0)}) as world:
        async with WorldTools(world.base_url, store=store) as kit:
            flight = _cheapest((await kit.search_flights("北京", "上海", DAY)).value["flights"])
            args = {"flight_id": flight["flight_id"], "passenger": "王芳"}
            with pytest.raises(ReconciliationRequiredError):
                await kit.book_flight(**args)
            outcome = await Executor(EffectLedger(store)).execute(
                kit.actions["book_flight"].with_retry(RetryPolicy(StopAfterAttempt(2))),
                args,
                task_id="t-lost",
                step=0,
            )
        assert outcome.status is OutcomeStatus.FAILED and outcome.attempts == 2
        assert world.effects == ()  # asked twice, never booked, never a duplicate


async def test_room_booking_lost_after_commit_is_recovered_with_its_id(
    serve_faults: ServeFaults,
) -> None:
    store = MemoryStore()
    with serve_faults({"room_bookings_create": EndpointFaults(commit_then_fail_rate=1.0)}) as w:
        async with WorldTools(w.base_url, store=store) as kit:
            outcome = await Executor(EffectLedger(store)).execute(
                kit.actions["book_room"],
                {"room_id": "room-8", "date": "2025-06-04", "slot": "09:00"},
                task_id="t-room",
                step=0,
            )
        assert outcome.status is OutcomeStatus.SUCCEEDED, outcome.error
        assert observed_value(outcome.result)["booking_id"].startswith("RB-")
        assert w.counters["room_bookings_create"].effects == 1


async def test_rate_limited_effects_ask_for_a_retry(serve_faults: ServeFaults) -> None:
    with serve_faults({"bookings_create": EndpointFaults(rate_limit_rate=1.0)}) as world:
        async with WorldTools(world.base_url) as kit:
            with pytest.raises(ActionError, match="rate limiting"):
                await kit.book_flight("CA1-20250605", "张伟")


async def test_a_saga_undoes_booking_and_payment(
    tools: WorldTools, store: MemoryStore, world: WorldHandle
) -> None:
    ledger = EffectLedger(store)
    executor = Executor(ledger)
    booked, paid = await _book_and_pay(tools, executor, "t-saga")
    results = await executor.compensate("t-saga")
    assert [r.status for r in results] == [EffectStatus.COMPENSATED] * 2
    payment = world.world.payments[observed_value(paid.result)["payment_id"]]
    booking = world.world.bookings[observed_value(booked.result)["booking_id"]]
    assert payment.status == "refunded" and booking.status == "cancelled"
    # A second saga finds nothing left to undo, and undoing twice is harmless.
    await tools._undo_booking({}, booked.result)  # already cancelled: counts as done


async def test_a_booking_id_can_be_paid_and_compensation_works_from_stored_json(
    tools: WorldTools, world: WorldHandle
) -> None:
    flight = _cheapest((await tools.search_flights("广州", "成都", DAY)).value["flights"])
    booked = await tools.book_flight(flight["flight_id"], "李娜")
    paid = await tools.pay(booked.value["booking_id"], flight["price_cny"])
    assert paid.value["order_id"] == booked.value["order_id"]
    stored = paid.model_dump(mode="json")  # what the ledger keeps across a restart
    await tools.actions["pay"].compensate({"order_id": "x", "amount_cny": 0}, stored)
    assert world.world.payments[paid.value["payment_id"]].status == "refunded"


async def test_a_bad_slot_is_refused_before_anything_is_sent(tools: WorldTools) -> None:
    with pytest.raises(ToolError, match="slot"):
        await tools.book_room("room-1", "2025-06-04", "after lunch")


async def test_an_injected_client_is_shared_and_left_open(world: WorldHandle) -> None:
    async with httpx.AsyncClient() as client:
        async with WorldTools(world.base_url, client=client) as kit:
            assert (await kit.list_cities()).status is ObservationStatus.OK
        assert not client.is_closed


def test_actions_are_atomic_actions_with_names_matching_tools() -> None:
    kit = WorldTools("http://127.0.0.1:9", guard_duplicates=False)
    assert all(isinstance(a, AtomicAction) for a in kit.actions.values())
    assert kit.actions["pay"].preconditions == ()  # the world check can be turned off


async def test_today_is_the_worlds_date_not_the_hosts(tools: WorldTools) -> None:
    assert await tools.today() == DATA.today.isoformat() == "2025-06-02"
