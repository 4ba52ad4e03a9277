"""Meeting rooms, the shop (products and orders) and the quarterly report documents."""

from __future__ import annotations

import re
from typing import Annotated, Any

from fastapi import Body, FastAPI, Query

from ._data import OrderLine
from ._generate import OPEN_HOURS
from ._http import CtxDep, WorldDep, answer
from ._routes_travel import cancel_booking
from ._schemas import (
    DocumentList,
    DocumentOut,
    DocumentSummary,
    OrderCancelOut,
    OrderList,
    OrderOut,
    OrderRequest,
    PaymentOut,
    Problem,
    ProductList,
    ProductOut,
    RoomBookingOut,
    RoomBookingRequest,
    RoomList,
    RoomOut,
    RoomSlots,
    Slot,
)
from ._world import Failure, RoomBooking, World, fail

__all__ = ["register_office"]

_ERRORS: dict[int | str, dict[str, Any]] = {
    404: {"model": Problem},
    409: {"model": Problem},
    422: {"model": Problem},
}
_QUARTER = re.compile(r"^(\d{4})-?Q([1-4])$", re.IGNORECASE)


def _day(world: World, text: str) -> Any:
    day = world.parse_date(text)
    if isinstance(day, Failure):
        return day
    return world.check_schedule_date(day) or day


def _rooms(
    world: World, date: str | None, capacity: int | None, equipment: str | None
) -> RoomList | Failure:
    day = None
    if date is not None:
        day = _day(world, date)
        if isinstance(day, Failure):
            return day
    rows = []
    for room in sorted(world.data.rooms, key=lambda r: (r.capacity, r.room_id)):
        if capacity is not None and room.capacity < capacity:
            continue
        if equipment is not None and equipment not in room.equipment:
            continue
        free = None
        if day is not None:
            hours = world.free_hours(room.room_id, day)
            free = len(hours or [])
            if not free:
                continue  # with a date, only rooms that can still be booked
        rows.append(RoomOut(**room.model_dump(), free_slot_count=free))
    # An empty list means "no room matches", never "any room will do".
    return RoomList(date=day, min_capacity=capacity, rooms=rows, count=len(rows))


def _slots(world: World, room_id: str, date: str) -> RoomSlots | Failure:
    if room_id not in world.rooms_by_id:
        return fail(404, "unknown_room", f"room_id={room_id!r}: no such room")
    day = _day(world, date)
    if isinstance(day, Failure):
        return day
    hours = world.free_hours(room_id, day)
    slots = [Slot(start=f"{h:02d}:00", end=f"{h + 1:02d}:00") for h in hours or []]
    return RoomSlots(room_id=room_id, date=day, open=hours is not None, free_slots=slots)


def _book_room(
    world: World, room_id: str, req: RoomBookingRequest, request_id: str, key: str | None
) -> RoomBookingOut | Failure:
    if room_id not in world.rooms_by_id:
        return fail(404, "unknown_room", f"room_id={room_id!r}: no such room")
    bad = world.check_schedule_date(req.date)
    if bad is not None:
        return bad
    start, end = int(req.start[:2]), int(req.end[:2])
    if not OPEN_HOURS[0] <= start < end <= OPEN_HOURS[1]:
        return fail(
            422,
            "invalid_time_range",
            f"{req.start}-{req.end}: need start < end within "
            f"{OPEN_HOURS[0]:02d}:00-{OPEN_HOURS[1]:02d}:00",
        )
    with world.lock:
        free = world.free_hours(room_id, req.date)
        if free is None:
            return fail(409, "room_closed", f"{room_id} cannot be booked on {req.date}")
        taken = [f"{h:02d}:00" for h in range(start, end) if h not in free]
        if taken:
            return fail(409, "slot_taken", f"{room_id} is taken at {', '.join(taken)}", taken=taken)
        booking = RoomBooking(
            world.next_id("RB"),
            room_id,
            req.date,
            tuple(range(start, end)),
            req.organizer,
            req.title,
        )
        world.room_bookings[booking.booking_id] = booking
        world.recorder.record_effect(
            "room_bookings_create",
            f"{room_id}|{req.date}|{req.start}-{req.end}",
            duplicate=False,
            request_id=request_id,
            idempotency_key=key,
        )
        return _room_booking_out(booking)


def _room_booking_out(b: RoomBooking) -> RoomBookingOut:
    return RoomBookingOut(
        booking_id=b.booking_id,
        room_id=b.room_id,
        date=b.date,
        start=f"{b.hours[0]:02d}:00",
        end=f"{b.hours[-1] + 1:02d}:00",
        organizer=b.organizer,
        title=b.title,
        status="cancelled" if b.status == "cancelled" else "confirmed",
    )


def _order(world: World, req: OrderRequest, request_id: str, key: str | None) -> Any:
    products = {p.sku: p for p in world.data.products}
    wanted: dict[str, int] = {}
    for item in req.items:
        if item.sku not in products:
            return fail(422, "unknown_sku", f"sku={item.sku!r}: no such product", sku=item.sku)
        wanted[item.sku] = wanted.get(item.sku, 0) + item.quantity
    with world.lock:
        for sku, qty in wanted.items():
            if world.stock[sku] < qty:
                return fail(
                    409,
                    "out_of_stock",
                    f"{sku}: {qty} wanted, {world.stock[sku]} in stock",
                    sku=sku,
                    available=world.stock[sku],
                )
        customer = req.customer.strip()
        lines = tuple(
            OrderLine(sku=s, quantity=q, unit_price_cny=products[s].price_cny)
            for s, q in sorted(wanted.items())
        )
        target = f"{customer}|" + ",".join(f"{ln.sku}x{ln.quantity}" for ln in lines)
        duplicate = any(
            o.kind == "goods"
            and o.status in ("created", "paid")
            and f"{o.customer}|" + ",".join(f"{ln.sku}x{ln.quantity}" for ln in o.lines) == target
            for o in world.orders.values()
        )
        for sku, qty in wanted.items():
            world.stock[sku] -= qty
        order = world.new_order("goods", customer, lines)
        world.recorder.record_effect(
            "orders_create", target, duplicate=duplicate, request_id=request_id, idempotency_key=key
        )
        return world.order_out(order)


def _cancel_order(world: World, order_id: str, request_id: str, key: str | None) -> Any:
    with world.lock:
        order = world.orders.get(order_id)
        if order is None:
            return fail(404, "unknown_order", f"order_id={order_id!r}: no such order")
        if order.booking_id is not None:  # a flight order is cancelled with its booking
            result = cancel_booking(world, order.booking_id, request_id, key, "orders_cancel")
            if isinstance(result, Failure):
                return result
            return OrderCancelOut(order=world.order_out(order), refunds=result.refunds)
        if order.status == "cancelled":
            return fail(409, "already_cancelled", f"order {order_id} is already cancelled")
        if order.status in ("shipped", "delivered"):
            return fail(409, "cannot_cancel", f"order {order_id} is already {order.status}")
        order.status = "cancelled"
        for line in order.lines:
            world.stock[line.sku] += line.quantity
        refunds = world.refund_all(order)
        world.recorder.record_effect(
            "orders_cancel", order_id, duplicate=False, request_id=request_id, idempotency_key=key
        )
        return OrderCancelOut(order=world.order_out(order), refunds=refunds)


def _documents(world: World, company: str | None, quarter: str | None) -> Any:
    wanted_quarter = None
    if quarter is not None:
        m = _QUARTER.match(quarter.strip())
        if m is None:
            return fail(422, "invalid_quarter", f"quarter={quarter!r}: expected e.g. 2024Q2")
        wanted_quarter = f"{m.group(1)}Q{m.group(2)}"
    companies = {c.company_id: c for c in world.data.companies}
    rows = []
    for doc in world.data.documents:
        c = companies[doc.company_id]
        if company is not None and company.strip().casefold() not in {
            c.company_id,
            c.name.casefold(),
            c.name_en.casefold(),
            c.ticker.casefold(),
        }:
            continue
        if wanted_quarter is not None and doc.quarter != wanted_quarter:
            continue
        rows.append(_summary(world, doc.doc_id))
    return DocumentList(documents=rows, count=len(rows))


def _summary(world: World, doc_id: str) -> DocumentSummary:
    doc = next(d for d in world.data.documents if d.doc_id == doc_id)
    c = next(c for c in world.data.companies if c.company_id == doc.company_id)
    return DocumentSummary(
        doc_id=doc.doc_id,
        company=c.name,
        company_en=c.name_en,
        ticker=c.ticker,
        quarter=doc.quarter,
        title=doc.title,
        language=doc.language,
    )


def register_office(app: FastAPI) -> None:
    """Add the rooms, shop and documents routes to ``app``."""

    @app.get("/rooms", name="rooms", response_model=RoomList, responses=_ERRORS)
    async def rooms(
        world: WorldDep,
        date: Annotated[
            str | None, Query(description="YYYY-MM-DD; then only bookable rooms")
        ] = None,
        capacity: Annotated[int | None, Query(ge=1, description="minimum seats")] = None,
        equipment: Annotated[str | None, Query(description="e.g. projector")] = None,
    ) -> Any:
        """Rooms with at least ``capacity`` seats; with ``date``, only those with a free slot."""
        return answer(_rooms(world, date, capacity, equipment))

    @app.get(
        "/rooms/{room_id}/slots", name="room_slots", response_model=RoomSlots, responses=_ERRORS
    )
    async def room_slots(world: WorldDep, room_id: str, date: str) -> Any:
        """Free one-hour slots; ``free_slots: []`` means fully booked or closed, not free."""
        return answer(_slots(world, room_id, date))

    @app.post(
        "/rooms/{room_id}/bookings",
        name="room_bookings_create",
        status_code=201,
        response_model=RoomBookingOut,
        responses=_ERRORS,
    )
    async def room_bookings_create(
        world: WorldDep, ctx: CtxDep, room_id: str, req: RoomBookingRequest
    ) -> Any:
        """Book whole hours of a room; a taken hour answers 409 ``slot_taken``."""
        return answer(_book_room(world, room_id, req, ctx.request_id, ctx.idempotency_key))

    @app.post(
        "/room-bookings/{booking_id}/cancel",
        name="room_bookings_cancel",
        response_model=RoomBookingOut,
        responses=_ERRORS,
    )
    async def room_bookings_cancel(world: WorldDep, ctx: CtxDep, booking_id: str) -> Any:
        """Compensation: free the booked hours."""
        with world.lock:
            booking = world.room_bookings.get(booking_id)
            if booking is None:
                return answer(fail(404, "unknown_booking", f"booking_id={booking_id!r}: not found"))
            if booking.status == "cancelled":
                return answer(fail(409, "already_cancelled", f"{booking_id} is already cancelled"))
            booking.status = "cancelled"
            world.recorder.record_effect(
                "room_bookings_cancel",
                booking_id,
                duplicate=False,
                request_id=ctx.request_id,
                idempotency_key=ctx.idempotency_key,
            )
            return _room_booking_out(booking)

    @app.get("/products", name="products", response_model=ProductList)
    async def products(
        world: WorldDep, q: Annotated[str | None, Query(description="substring of name/SKU")] = None
    ) -> Any:
        rows = [
            ProductOut(**{**p.model_dump(), "stock": world.stock[p.sku]})
            for p in world.data.products
            if q is None or q.casefold() in f"{p.sku} {p.name} {p.name_en}".casefold()
        ]
        return ProductList(products=rows, count=len(rows))

    @app.get("/orders", name="orders_list", response_model=OrderList)
    async def orders_list(world: WorldDep, customer: Annotated[str | None, Query()] = None) -> Any:
        with world.lock:
            rows = [
                world.order_out(o)
                for o in world.orders.values()
                if customer is None or o.customer == customer.strip()
            ]
        return OrderList(orders=rows, count=len(rows))

    @app.post(
        "/orders",
        name="orders_create",
        status_code=201,
        response_model=OrderOut,
        responses=_ERRORS,
    )
    async def orders_create(world: WorldDep, ctx: CtxDep, req: OrderRequest) -> Any:
        """Create an order (takes stock). Not idempotent without a key."""
        return answer(_order(world, req, ctx.request_id, ctx.idempotency_key))

    @app.get("/orders/{order_id}", name="orders_get", response_model=OrderOut, responses=_ERRORS)
    async def orders_get(world: WorldDep, order_id: str) -> Any:
        with world.lock:
            order = world.orders.get(order_id)
            if order is None:
                return answer(fail(404, "unknown_order", f"order_id={order_id!r}: not found"))
            return world.order_out(order)

    @app.post(
        "/orders/{order_id}/pay",
        name="orders_pay",
        status_code=201,
        response_model=PaymentOut,
        responses=_ERRORS,
    )
    async def orders_pay(
        world: WorldDep,
        ctx: CtxDep,
        order_id: str,
        amount_cny: Annotated[int | None, Body(embed=True)] = None,
    ) -> Any:
        """Charge the order. Irreversible; paying a paid order charges it again."""
        return answer(
            world.pay(
                "orders_pay",
                order_id,
                amount_cny,
                request_id=ctx.request_id,
                idempotency_key=ctx.idempotency_key,
            )
        )

    @app.post(
        "/orders/{order_id}/cancel",
        name="orders_cancel",
        response_model=OrderCancelOut,
        responses=_ERRORS,
    )
    async def orders_cancel(world: WorldDep, ctx: CtxDep, order_id: str) -> Any:
        """Compensation: cancel an unshipped order, restock it and refund its payments."""
        return answer(_cancel_order(world, order_id, ctx.request_id, ctx.idempotency_key))

    @app.get("/documents", name="documents", response_model=DocumentList, responses=_ERRORS)
    async def documents(
        world: WorldDep,
        company: Annotated[str | None, Query(description="name, English name or ticker")] = None,
        quarter: Annotated[str | None, Query(description="e.g. 2024Q2")] = None,
    ) -> Any:
        """Search quarterly reports; an unknown company matches nothing (empty list)."""
        return answer(_documents(world, company, quarter))

    @app.get(
        "/documents/{doc_id}", name="documents_get", response_model=DocumentOut, responses=_ERRORS
    )
    async def documents_get(world: WorldDep, doc_id: str) -> Any:
        """One report's text, as OCR read it (look-alike characters, stray spaces)."""
        doc = next((d for d in world.data.documents if d.doc_id == doc_id), None)
        if doc is None:
            return answer(fail(404, "unknown_document", f"doc_id={doc_id!r}: no such document"))
        return DocumentOut(**_summary(world, doc_id).model_dump(), text=doc.text)
