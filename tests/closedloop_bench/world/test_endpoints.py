"""Each endpoint's data and semantics, with no faults (profile ``none``)."""

from __future__ import annotations

import datetime as dt

import httpx
import pytest

from closedloop_bench.world import World

TODAY = "2025-06-02"
TOMORROW = "2025-06-03"
SATURDAY = "2025-06-07"


async def test_every_response_has_a_distinct_request_id(client: httpx.AsyncClient) -> None:
    responses = [
        await client.get("/cities"),
        await client.get("/weather", params={"city": "北就"}),
        await client.get("/nowhere"),
        await client.get("/health"),
    ]
    ids = [r.headers["x-request-id"] for r in responses]
    assert len(set(ids)) == 4 and all(i.startswith("req-") for i in ids)
    assert responses[2].status_code == 404


async def test_cities_lists_names_codes_and_abbreviations(
    client: httpx.AsyncClient, world: World
) -> None:
    body = (await client.get("/cities")).json()
    assert body["count"] == len(world.data.cities) == len(body["cities"])
    beijing = next(c for c in body["cities"] if c["name"] == "北京")
    assert beijing == {"name": "北京", "name_en": "Beijing", "code": "BJS", "abbreviation": "京"}
    assert "typos" not in beijing  # resolving typos is the agent's job


@pytest.mark.parametrize("query", ["北京", "Beijing", "beijing", "BJS"])
async def test_weather_by_exact_name_english_name_or_code(
    client: httpx.AsyncClient, world: World, query: str
) -> None:
    r = await client.get("/weather", params={"city": query, "date": TOMORROW})
    assert r.status_code == 200
    body = r.json()
    truth = world.weather_by_key[("北京", dt.date(2025, 6, 3))]
    assert body["city"] == "北京" and body["city_en"] == "Beijing" and body["date"] == TOMORROW
    assert body["temperature_c"] == truth.temperature_c
    assert body["condition"] == truth.condition
    assert set(body) >= {"temp_min_c", "temp_max_c", "humidity_pct", "precipitation_mm"}


async def test_weather_defaults_to_the_worlds_today(client: httpx.AsyncClient) -> None:
    assert (await client.get("/weather", params={"city": "上海"})).json()["date"] == TODAY


@pytest.mark.parametrize("query", ["北就", "京", "沪", "Bejing", "拉萨", "Atlantis"])
async def test_typos_abbreviations_and_unknown_cities_are_404(
    client: httpx.AsyncClient, query: str
) -> None:
    r = await client.get("/weather", params={"city": query})
    assert r.status_code == 404
    body = r.json()
    assert body["error"] == "unknown_city" and body["city"] == query
    assert "/cities" in body["detail"]
    assert "temperature_c" not in body


@pytest.mark.parametrize(
    ("date", "status", "error"),
    [
        ("2025-02-30", 422, "invalid_date"),
        ("tomorrow", 422, "invalid_date"),
        ("2025/06/03", 422, "invalid_date"),
        ("2025-07-30", 404, "no_data_for_date"),
        ("2025-05-01", 404, "no_data_for_date"),
    ],
)
async def test_weather_bad_dates(
    client: httpx.AsyncClient, date: str, status: int, error: str
) -> None:
    r = await client.get("/weather", params={"city": "北京", "date": date})
    assert (r.status_code, r.json()["error"]) == (status, error)


async def test_weather_missing_city_is_a_validation_error(client: httpx.AsyncClient) -> None:
    assert (await client.get("/weather")).status_code == 422


async def test_flights_sorted_and_matching_the_data(
    client: httpx.AsyncClient, world: World
) -> None:
    r = await client.get("/flights", params={"from": "北京", "to": "Shanghai", "date": TOMORROW})
    assert r.status_code == 200
    body = r.json()
    truth = [
        f
        for f in world.data.flights
        if f.origin == "BJS" and f.destination == "SHA" and str(f.date) == TOMORROW
    ]
    assert body["count"] == len(truth) > 0
    assert [f["depart_time"] for f in body["flights"]] == sorted(t.depart_time for t in truth)
    first = body["flights"][0]
    assert first["origin"] == "北京" and first["destination_code"] == "SHA"
    assert {f["price_cny"] for f in body["flights"]} == {t.price_cny for t in truth}


async def test_flights_between_known_unconnected_cities_are_an_empty_list(
    client: httpx.AsyncClient,
) -> None:
    r = await client.get("/flights", params={"from": "天津", "to": "厦门", "date": TOMORROW})
    assert r.status_code == 200 and r.json()["flights"] == [] and r.json()["count"] == 0


@pytest.mark.parametrize(
    ("params", "status", "error"),
    [
        ({"from": "北就", "to": "上海", "date": TOMORROW}, 404, "unknown_city"),
        ({"from": "北京", "to": "沪", "date": TOMORROW}, 404, "unknown_city"),
        ({"from": "北京", "to": "BJS", "date": TOMORROW}, 422, "same_city"),
        ({"from": "北京", "to": "上海", "date": "2025-06-01"}, 422, "date_in_past"),
        ({"from": "北京", "to": "上海", "date": "2025-09-01"}, 404, "no_schedule_for_date"),
        ({"from": "北京", "to": "上海", "date": "2025-13-01"}, 422, "invalid_date"),
    ],
)
async def test_flights_bad_input(
    client: httpx.AsyncClient, params: dict[str, str], status: int, error: str
) -> None:
    r = await client.get("/flights", params=params)
    assert (r.status_code, r.json()["error"]) == (status, error)


async def _book_cheapest(client: httpx.AsyncClient, passenger: str = "张伟") -> dict[str, object]:
    flights = (
        await client.get("/flights", params={"from": "上海", "to": "广州", "date": TOMORROW})
    ).json()["flights"]
    cheapest = min((f for f in flights if f["seats_left"] > 0), key=lambda f: f["price_cny"])
    r = await client.post(
        "/bookings", json={"flight_id": cheapest["flight_id"], "passenger": passenger}
    )
    assert r.status_code == 201
    booking: dict[str, object] = r.json()
    assert booking["amount_due_cny"] == cheapest["price_cny"] and booking["status"] == "held"
    return booking


async def test_book_then_pay_confirms_and_takes_a_seat(
    client: httpx.AsyncClient, world: World
) -> None:
    booking = await _book_cheapest(client)
    flight_id = str(booking["flight_id"])
    before = world.flights_by_id[flight_id].seats
    assert world.seats[flight_id] == before - 1
    r = await client.post("/payments", json={"order_id": booking["order_id"]})
    assert r.status_code == 201 and r.json()["status"] == "succeeded"
    assert r.json()["amount_cny"] == booking["amount_due_cny"]
    got = (await client.get(f"/bookings/{booking['booking_id']}")).json()
    assert got["status"] == "confirmed"
    order = (await client.get(f"/orders/{booking['order_id']}")).json()
    assert order["status"] == "paid" and order["paid_cny"] == booking["amount_due_cny"]
    c = world.counters()
    assert c["bookings_create"].effects == 1 and c["payments_create"].duplicates == 0


async def test_paying_twice_without_a_key_charges_twice_and_is_counted(
    client: httpx.AsyncClient, world: World
) -> None:
    booking = await _book_cheapest(client)
    for _ in range(2):
        assert (
            await client.post("/payments", json={"order_id": booking["order_id"]})
        ).status_code == 201
    c = world.counters()["payments_create"]
    assert (c.calls, c.effects, c.distinct_effects, c.duplicates) == (2, 2, 1, 1)
    assert c.missing_idempotency_key == 2 and c.replays == 0
    order = (await client.get(f"/orders/{booking['order_id']}")).json()
    assert order["paid_cny"] == 2 * int(str(booking["amount_due_cny"]))
    assert [e.duplicate for e in world.effects("payments_create")] == [False, True]


async def test_paying_twice_with_one_key_charges_once(
    client: httpx.AsyncClient, world: World
) -> None:
    booking = await _book_cheapest(client)
    headers = {"Idempotency-Key": "pay-1"}
    body = {"order_id": booking["order_id"]}
    first = await client.post("/payments", json=body, headers=headers)
    second = await client.post("/payments", json=body, headers=headers)
    assert first.status_code == second.status_code == 201
    assert first.json() == second.json()
    assert second.headers["idempotent-replayed"] == "true"
    c = world.counters()["payments_create"]
    assert (c.calls, c.effects, c.duplicates, c.replays, c.missing_idempotency_key) == (
        2,
        1,
        0,
        1,
        0,
    )
    other = await client.post(
        "/payments", json={"order_id": booking["order_id"], "amount_cny": 1}, headers=headers
    )
    assert other.status_code == 422 and other.json()["error"] == "idempotency_key_reused"


async def test_payment_errors(client: httpx.AsyncClient) -> None:
    booking = await _book_cheapest(client)
    r = await client.post("/payments", json={"order_id": "ORD-nope"})
    assert (r.status_code, r.json()["error"]) == (404, "unknown_order")
    r = await client.post("/payments", json={"order_id": booking["order_id"], "amount_cny": 1})
    assert (r.status_code, r.json()["error"]) == (422, "amount_mismatch")
    assert r.json()["total_cny"] == booking["amount_due_cny"]
    assert (await client.post("/payments", json={})).status_code == 422


async def test_cancel_booking_refunds_and_frees_the_seat(
    client: httpx.AsyncClient, world: World
) -> None:
    booking = await _book_cheapest(client)
    flight_id = str(booking["flight_id"])
    seats = world.seats[flight_id]
    paid = (await client.post("/payments", json={"order_id": booking["order_id"]})).json()
    r = await client.post(f"/bookings/{booking['booking_id']}/cancel")
    assert r.status_code == 200
    assert r.json()["booking"]["status"] == "cancelled"
    assert [p["payment_id"] for p in r.json()["refunds"]] == [paid["payment_id"]]
    assert world.seats[flight_id] == seats + 1
    assert (await client.get(f"/payments/{paid['payment_id']}")).json()["status"] == "refunded"
    again = await client.post(f"/bookings/{booking['booking_id']}/cancel")
    assert (again.status_code, again.json()["error"]) == (409, "already_cancelled")
    late = await client.post("/payments", json={"order_id": booking["order_id"]})
    assert (late.status_code, late.json()["error"]) == (409, "order_cancelled")


async def test_refund_one_duplicate_charge(client: httpx.AsyncClient, world: World) -> None:
    booking = await _book_cheapest(client)
    oid = booking["order_id"]
    await client.post("/payments", json={"order_id": oid})
    dup = (await client.post("/payments", json={"order_id": oid})).json()
    r = await client.post(f"/payments/{dup['payment_id']}/refund")
    assert r.status_code == 200 and r.json()["status"] == "refunded"
    order = (await client.get(f"/orders/{oid}")).json()
    assert order["status"] == "paid" and order["paid_cny"] == booking["amount_due_cny"]
    again = await client.post(f"/payments/{dup['payment_id']}/refund")
    assert again.status_code == 409
    assert world.counters()["payments_refund"].effects == 1


async def test_booking_twice_is_a_duplicate_and_sold_out_is_409(
    client: httpx.AsyncClient, world: World
) -> None:
    first = await _book_cheapest(client, "李娜")
    r = await client.post(
        "/bookings", json={"flight_id": first["flight_id"], "passenger": " 李娜 "}
    )
    assert r.status_code == 201
    c = world.counters()["bookings_create"]
    assert (c.effects, c.duplicates) == (2, 1)
    sold_out = next(f for f in world.data.flights if f.seats == 0)
    r = await client.post("/bookings", json={"flight_id": sold_out.flight_id, "passenger": "x"})
    assert (r.status_code, r.json()["error"]) == (409, "sold_out")
    r = await client.post("/bookings", json={"flight_id": "XX0000-20250603", "passenger": "x"})
    assert (r.status_code, r.json()["error"]) == (404, "unknown_flight")
    assert world.counters()["bookings_create"].rejected == 2


async def test_rooms_filter_by_capacity_and_availability(
    client: httpx.AsyncClient, world: World
) -> None:
    all_rooms = (await client.get("/rooms")).json()
    assert all_rooms["count"] == len(world.data.rooms)
    big = (await client.get("/rooms", params={"capacity": 12})).json()["rooms"]
    assert big and all(r["capacity"] >= 12 for r in big)
    huge = (await client.get("/rooms", params={"capacity": 500})).json()
    assert huge["rooms"] == [] and huge["count"] == 0  # nothing fits; not "no limit"
    tomorrow = (await client.get("/rooms", params={"date": TOMORROW})).json()["rooms"]
    for room in tomorrow:
        assert room["free_slot_count"] == len(
            world.free_hours(room["room_id"], dt.date(2025, 6, 3)) or []
        )
        assert room["free_slot_count"] > 0
    weekend = (await client.get("/rooms", params={"date": SATURDAY})).json()
    assert weekend["rooms"] == []
    assert (await client.get("/rooms", params={"capacity": 0})).status_code == 422


async def test_room_slots_follow_reservations(client: httpx.AsyncClient, world: World) -> None:
    day = dt.date(2025, 6, 3)
    for room in world.data.rooms:
        r = await client.get(f"/rooms/{room.room_id}/slots", params={"date": TOMORROW})
        body = r.json()
        taken = {
            int(x.start[:2])
            for x in world.data.reservations
            if x.room_id == room.room_id and x.date == day
        }
        closed = (room.room_id, day) in world.closed
        assert body["open"] is not closed
        expected = [] if closed else [h for h in range(9, 18) if h not in taken]
        assert [int(s["start"][:2]) for s in body["free_slots"]] == expected
    sat = (await client.get("/rooms/room-3/slots", params={"date": SATURDAY})).json()
    assert sat["open"] is False and sat["free_slots"] == []
    r = await client.get("/rooms/room-99/slots", params={"date": TOMORROW})
    assert (r.status_code, r.json()["error"]) == (404, "unknown_room")


async def test_book_a_room_slot_then_it_is_taken_then_cancel(
    client: httpx.AsyncClient, world: World
) -> None:
    slots = (await client.get("/rooms/room-3/slots", params={"date": TOMORROW})).json()
    start = slots["free_slots"][0]["start"]
    end = f"{int(start[:2]) + 1:02d}:00"
    body = {"date": TOMORROW, "start": start, "end": end, "organizer": "王芳", "title": "周会"}
    r = await client.post("/rooms/room-3/bookings", json=body)
    assert r.status_code == 201 and r.json()["status"] == "confirmed"
    booking_id = r.json()["booking_id"]
    after = (await client.get("/rooms/room-3/slots", params={"date": TOMORROW})).json()
    assert start not in [s["start"] for s in after["free_slots"]]
    again = await client.post("/rooms/room-3/bookings", json=body)
    assert (again.status_code, again.json()["error"]) == (409, "slot_taken")
    assert again.json()["taken"] == [start]
    r = await client.post(f"/room-bookings/{booking_id}/cancel")
    assert r.status_code == 200 and r.json()["status"] == "cancelled"
    restored = (await client.get("/rooms/room-3/slots", params={"date": TOMORROW})).json()
    assert restored == slots
    c = world.counters()
    assert c["room_bookings_create"].effects == 1 and c["room_bookings_create"].rejected == 1
    assert c["room_bookings_cancel"].effects == 1


@pytest.mark.parametrize(
    ("body", "status", "error"),
    [
        ({"date": SATURDAY, "start": "10:00", "end": "11:00"}, 409, "room_closed"),
        ({"date": TOMORROW, "start": "11:00", "end": "10:00"}, 422, "invalid_time_range"),
        ({"date": TOMORROW, "start": "08:00", "end": "10:00"}, 422, "invalid_time_range"),
        ({"date": "2025-05-01", "start": "10:00", "end": "11:00"}, 422, "date_in_past"),
    ],
)
async def test_room_booking_refusals(
    client: httpx.AsyncClient, body: dict[str, str], status: int, error: str
) -> None:
    r = await client.post("/rooms/room-2/bookings", json={**body, "organizer": "x"})
    assert (r.status_code, r.json()["error"]) == (status, error)


async def test_orders_create_pay_cancel_and_stock(client: httpx.AsyncClient, world: World) -> None:
    product = next(p for p in world.data.products if p.stock >= 3)
    body = {"customer": "刘洋", "items": [{"sku": product.sku, "quantity": 2}]}
    r = await client.post("/orders", json=body)
    assert r.status_code == 201
    order = r.json()
    assert order["total_cny"] == 2 * product.price_cny and order["status"] == "created"
    assert world.stock[product.sku] == product.stock - 2
    dup = await client.post("/orders", json=body)
    assert dup.status_code == 201
    assert world.counters()["orders_create"].duplicates == 1
    pay = await client.post(
        f"/orders/{order['order_id']}/pay", json={"amount_cny": order["total_cny"]}
    )
    assert pay.status_code == 201
    assert (await client.get(f"/orders/{order['order_id']}")).json()["status"] == "paid"
    cancel = await client.post(f"/orders/{order['order_id']}/cancel")
    assert cancel.status_code == 200 and len(cancel.json()["refunds"]) == 1
    assert world.stock[product.sku] == product.stock - 2  # the duplicate order still holds 2
    listed = (await client.get("/orders", params={"customer": "刘洋"})).json()["orders"]
    assert {o["order_id"] for o in listed} >= {order["order_id"], dup.json()["order_id"]}


async def test_order_refusals(client: httpx.AsyncClient, world: World) -> None:
    r = await client.post(
        "/orders", json={"customer": "x", "items": [{"sku": "SKU-0", "quantity": 1}]}
    )
    assert (r.status_code, r.json()["error"]) == (422, "unknown_sku")
    empty = next(p for p in world.data.products if p.stock == 0)
    r = await client.post(
        "/orders", json={"customer": "x", "items": [{"sku": empty.sku, "quantity": 1}]}
    )
    assert (r.status_code, r.json()["error"], r.json()["available"]) == (409, "out_of_stock", 0)
    shipped = next(o for o in world.data.orders if o.status == "shipped")
    r = await client.post(f"/orders/{shipped.order_id}/cancel")
    assert (r.status_code, r.json()["error"]) == (409, "cannot_cancel")
    assert (await client.post("/orders", json={"customer": "x", "items": []})).status_code == 422


async def test_historical_orders_answer_status_and_tracking(
    client: httpx.AsyncClient, world: World
) -> None:
    for past in world.data.orders:
        body = (await client.get(f"/orders/{past.order_id}")).json()
        assert body["status"] == past.status and body["total_cny"] == past.total_cny
        assert (body["tracking"] is not None) == (past.status in ("shipped", "delivered"))
    assert (await client.get("/orders/ORD-0")).status_code == 404


async def test_paying_an_already_shipped_order_is_a_duplicate_charge(
    client: httpx.AsyncClient, world: World
) -> None:
    shipped = next(o for o in world.data.orders if o.status == "shipped")
    r = await client.post(f"/orders/{shipped.order_id}/pay")
    assert r.status_code == 201
    assert world.counters()["orders_pay"].duplicates == 1


async def test_documents_search_and_read(client: httpx.AsyncClient, world: World) -> None:
    every = (await client.get("/documents")).json()
    assert every["count"] == len(world.data.documents) == 32
    for company in ("华辰科技", "Huachen Technology", "hct", "HCT"):
        found = (await client.get("/documents", params={"company": company})).json()
        assert found["count"] == 8 and {d["ticker"] for d in found["documents"]} == {"HCT"}
    one = (await client.get("/documents", params={"company": "HCT", "quarter": "2024-q2"})).json()
    assert [d["doc_id"] for d in one["documents"]] == ["doc-hct-2024q2"]
    none = (await client.get("/documents", params={"company": "Nobody Inc"})).json()
    assert none["documents"] == []
    bad = await client.get("/documents", params={"quarter": "2024Q5"})
    assert (bad.status_code, bad.json()["error"]) == (422, "invalid_quarter")
    for doc in world.data.documents:
        body = (await client.get(f"/documents/{doc.doc_id}")).json()
        assert body["text"] == doc.text and body["quarter"] == doc.quarter
        assert "truth" not in body and "clean_text" not in body
    assert (await client.get("/documents/doc-x")).status_code == 404


async def test_admin_reset_starts_a_new_episode(client: httpx.AsyncClient, world: World) -> None:
    booking = await _book_cheapest(client)
    await client.post("/payments", json={"order_id": booking["order_id"]})
    counters = (await client.get("/admin/counters")).json()
    assert counters["endpoints"]["payments_create"]["effects"] == 1
    assert counters["requests"]["flights"] == 1
    effects = (await client.get("/admin/effects")).json()
    assert [e["endpoint"] for e in effects["effects"]] == ["bookings_create", "payments_create"]
    r = await client.post("/admin/reset", params={"fault_seed": 9})
    assert r.status_code == 200 and r.json()["fault_seed"] == 9
    assert world.counters()["payments_create"].effects == 0
    assert world.request_counts() == {}
    assert world.bookings == {}
    profile = (await client.get("/admin/profile")).json()
    assert profile["name"] == "none"
    health = (await client.get("/health")).json()
    assert health["today"] == TODAY and health["profile"] == "none"


async def test_cancelling_a_flight_order_cancels_its_booking(
    client: httpx.AsyncClient, world: World
) -> None:
    booking = await _book_cheapest(client)
    await client.post("/payments", json={"order_id": booking["order_id"]})
    r = await client.post(f"/orders/{booking['order_id']}/cancel")
    assert r.status_code == 200
    assert r.json()["order"]["status"] == "cancelled" and len(r.json()["refunds"]) == 1
    got = (await client.get(f"/bookings/{booking['booking_id']}")).json()
    assert got["status"] == "cancelled"
    c = world.counters()
    assert (c["orders_cancel"].effects, c["bookings_cancel"].effects) == (1, 0)
    again = await client.post(f"/orders/{booking['order_id']}/cancel")
    assert (again.status_code, again.json()["error"]) == (409, "already_cancelled")
