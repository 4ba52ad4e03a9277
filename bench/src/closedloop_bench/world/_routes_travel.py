"""Weather, cities, flights, flight bookings and payments."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import FastAPI, Query

from ._data import OrderLine
from ._http import CtxDep, WorldDep, answer
from ._schemas import (
    BookingCancelOut,
    BookingOut,
    BookingRequest,
    CityList,
    CityOut,
    FlightList,
    FlightOut,
    PaymentOut,
    PaymentRequest,
    Problem,
    WeatherReport,
)
from ._world import Booking, Failure, World, fail

__all__ = ["register_travel"]

_ERRORS: dict[int | str, dict[str, Any]] = {
    404: {"model": Problem},
    409: {"model": Problem},
    422: {"model": Problem},
}


def _weather(world: World, city: str, date: str | None) -> WeatherReport | Failure:
    found = world.city(city)
    if found is None:
        return world.unknown_city(city, "city")
    day = world.data.today if date is None else world.parse_date(date)
    if isinstance(day, Failure):
        return day
    w = world.weather_by_key.get((found.name, day))
    if w is None:
        return fail(
            404,
            "no_data_for_date",
            f"no weather for {found.name} on {day}",
            available_from=world.data.weather_from,
            available_to=world.data.weather_to,
        )
    return WeatherReport(city_en=found.name_en, **w.model_dump())


def _flights(world: World, origin: str, destination: str, date: str) -> FlightList | Failure:
    a, b = world.city(origin), world.city(destination)
    if a is None:
        return world.unknown_city(origin, "from")
    if b is None:
        return world.unknown_city(destination, "to")
    if a.code == b.code:
        return fail(422, "same_city", f"from and to are both {a.name}")
    day = world.parse_date(date)
    if isinstance(day, Failure):
        return day
    bad = world.check_schedule_date(day)
    if bad is not None:
        return bad
    names = {c.code: c.name for c in world.data.cities}
    with world.lock:
        rows = [
            FlightOut(
                flight_id=f.flight_id,
                flight_no=f.flight_no,
                airline=f.airline,
                origin=names[f.origin],
                origin_code=f.origin,
                destination=names[f.destination],
                destination_code=f.destination,
                date=f.date,
                depart_time=f.depart_time,
                arrive_time=f.arrive_time,
                duration_min=f.duration_min,
                price_cny=f.price_cny,
                seats_left=world.seats[f.flight_id],
            )
            for f in world.data.flights
            if f.origin == a.code and f.destination == b.code and f.date == day
        ]
    rows.sort(key=lambda r: r.depart_time)
    # No route between two known cities is a real, empty answer, not an error.
    return FlightList(origin=a.name, destination=b.name, date=day, flights=rows, count=len(rows))


def _book(world: World, req: BookingRequest, request_id: str, key: str | None) -> Any:
    flight = world.flights_by_id.get(req.flight_id)
    if flight is None:
        return fail(404, "unknown_flight", f"flight_id={req.flight_id!r}: no such flight")
    with world.lock:
        if world.seats[flight.flight_id] <= 0:
            return fail(409, "sold_out", f"flight {flight.flight_id} has no seats left")
        passenger = req.passenger.strip()
        target = f"{flight.flight_id}|{passenger.casefold()}"
        duplicate = any(
            f"{b.flight_id}|{b.passenger.casefold()}" == target and b.status != "cancelled"
            for b in world.bookings.values()
        )
        booking_id = world.next_id("BK")
        line = OrderLine(sku=flight.flight_id, quantity=1, unit_price_cny=flight.price_cny)
        order = world.new_order("flight", passenger, (line,), booking_id=booking_id)
        booking = Booking(booking_id, flight.flight_id, passenger, order.order_id, order.total_cny)
        world.bookings[booking_id] = booking
        world.seats[flight.flight_id] -= 1
        world.recorder.record_effect(
            "bookings_create",
            target,
            duplicate=duplicate,
            request_id=request_id,
            idempotency_key=key,
        )
        return booking.out()


def cancel_booking(
    world: World,
    booking_id: str,
    request_id: str,
    key: str | None,
    endpoint: str = "bookings_cancel",
) -> Any:
    """Cancel a booking: free the seat, cancel its order, refund what was paid."""
    with world.lock:
        booking = world.bookings.get(booking_id)
        if booking is None:
            return fail(404, "unknown_booking", f"booking_id={booking_id!r}: no such booking")
        if booking.status == "cancelled":
            return fail(409, "already_cancelled", f"booking {booking_id} is already cancelled")
        booking.status = "cancelled"
        world.seats[booking.flight_id] += 1
        order = world.orders[booking.order_id]
        order.status = "cancelled"
        refunds = world.refund_all(order)
        world.recorder.record_effect(
            endpoint,
            booking_id,
            duplicate=False,
            request_id=request_id,
            idempotency_key=key,
        )
        return BookingCancelOut(booking=booking.out(), refunds=refunds)


def register_travel(app: FastAPI) -> None:
    """Add the travel routes to ``app``."""

    @app.get("/cities", name="cities", response_model=CityList)
    async def cities(world: WorldDep) -> Any:
        """Every city served, with its English name, code and abbreviation."""
        rows = [
            CityOut(name=c.name, name_en=c.name_en, code=c.code, abbreviation=c.abbreviation)
            for c in world.data.cities
        ]
        return CityList(cities=rows, count=len(rows))

    @app.get("/weather", name="weather", response_model=WeatherReport, responses=_ERRORS)
    async def weather(
        world: WorldDep,
        city: Annotated[str, Query(min_length=1, description="城市名 / city name / code")],
        date: Annotated[str | None, Query(description="YYYY-MM-DD; default today")] = None,
    ) -> Any:
        """The weather of one city on one date. Unknown names (typos too) answer 404."""
        return answer(_weather(world, city, date))

    @app.get("/flights", name="flights", response_model=FlightList, responses=_ERRORS)
    async def flights(
        world: WorldDep,
        origin: Annotated[str, Query(alias="from", min_length=1)],
        destination: Annotated[str, Query(alias="to", min_length=1)],
        date: Annotated[str, Query(description="YYYY-MM-DD")],
    ) -> Any:
        """Flights from one city to another on a date, by departure time (may be empty)."""
        return answer(_flights(world, origin, destination, date))

    @app.post(
        "/bookings",
        name="bookings_create",
        status_code=201,
        response_model=BookingOut,
        responses=_ERRORS,
    )
    async def bookings_create(world: WorldDep, ctx: CtxDep, req: BookingRequest) -> Any:
        """Hold a seat and create an order to pay. Not idempotent without a key."""
        return answer(_book(world, req, ctx.request_id, ctx.idempotency_key))

    @app.get(
        "/bookings/{booking_id}", name="bookings_get", response_model=BookingOut, responses=_ERRORS
    )
    async def bookings_get(world: WorldDep, booking_id: str) -> Any:
        booking = world.bookings.get(booking_id)
        if booking is None:
            return answer(fail(404, "unknown_booking", f"booking_id={booking_id!r}: not found"))
        return booking.out()

    @app.post(
        "/bookings/{booking_id}/cancel",
        name="bookings_cancel",
        response_model=BookingCancelOut,
        responses=_ERRORS,
    )
    async def bookings_cancel(world: WorldDep, ctx: CtxDep, booking_id: str) -> Any:
        """Compensation: cancel the booking and refund its payments."""
        return answer(cancel_booking(world, booking_id, ctx.request_id, ctx.idempotency_key))

    @app.post(
        "/payments",
        name="payments_create",
        status_code=201,
        response_model=PaymentOut,
        responses=_ERRORS,
    )
    async def payments_create(world: WorldDep, ctx: CtxDep, req: PaymentRequest) -> Any:
        """Charge an order. Irreversible; a paid order is charged again unless a key replays."""
        return answer(
            world.pay(
                "payments_create",
                req.order_id,
                req.amount_cny,
                request_id=ctx.request_id,
                idempotency_key=ctx.idempotency_key,
            )
        )

    @app.get(
        "/payments/{payment_id}", name="payments_get", response_model=PaymentOut, responses=_ERRORS
    )
    async def payments_get(world: WorldDep, payment_id: str) -> Any:
        payment = world.payments.get(payment_id)
        if payment is None:
            return answer(fail(404, "unknown_payment", f"payment_id={payment_id!r}: not found"))
        return payment.out()

    @app.post(
        "/payments/{payment_id}/refund",
        name="payments_refund",
        response_model=PaymentOut,
        responses=_ERRORS,
    )
    async def payments_refund(world: WorldDep, ctx: CtxDep, payment_id: str) -> Any:
        """Compensation: refund one payment."""
        return answer(
            world.refund(payment_id, request_id=ctx.request_id, idempotency_key=ctx.idempotency_key)
        )
