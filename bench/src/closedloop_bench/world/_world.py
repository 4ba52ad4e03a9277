"""The running world: data, fault planner, recorder, and the state effects change.

Business rules live here, free of HTTP: each method returns a response model or a
``Failure`` (status + ``Problem``), and every change goes through ``Recorder.record_effect``
with its target, so duplicates are counted where they happen. The payment endpoints are
deliberately *not* idempotent without a key: paying a paid order charges it again, as
the hazard the closed loop must prevent.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import re
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from closedloop._exceptions import ConfigurationError
from closedloop._validation import require_finite

from ._data import DEFAULT_SEED, City, HistoricalOrder, OrderLine, Tracking, WorldData, load_world
from ._faults import WorldFaultProfile, load_profile
from ._generate import OPEN_HOURS
from ._injector import FaultPlanner, WorldFaultEvent, WorldFaultKind
from ._recorder import Recorder
from ._regimes import RegimeChange
from ._schemas import (
    BookingOut,
    EffectCounters,
    OrderOut,
    PaymentOut,
    Problem,
    WorldEffectRecord,
)

__all__ = ["Booking", "Failure", "Order", "Payment", "RoomBooking", "World", "fail"]

_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


@dataclass(frozen=True, slots=True)
class Failure:
    """An error answer: the HTTP status and its body."""

    status: int
    problem: Problem


def fail(status: int, error: str, detail: str, **context: object) -> Failure:
    return Failure(status, Problem(error=error, detail=detail, **context))


@dataclass(slots=True)
class Order:
    order_id: str
    kind: str
    customer: str
    created: dt.date
    lines: tuple[OrderLine, ...]
    total_cny: int
    status: str
    tracking: Tracking | None = None
    prepaid_cny: int = 0  # paid before the world started (historical orders)
    payments: list[str] = field(default_factory=list)
    booking_id: str | None = None

    def out(self, paid_cny: int) -> OrderOut:
        return OrderOut(
            order_id=self.order_id,
            kind="flight" if self.kind == "flight" else "goods",
            customer=self.customer,
            created=self.created,
            lines=list(self.lines),
            total_cny=self.total_cny,
            paid_cny=paid_cny,
            status=self.status,  # type: ignore[arg-type]
            tracking=self.tracking,
        )


@dataclass(slots=True)
class Payment:
    payment_id: str
    order_id: str
    amount_cny: int
    status: str = "succeeded"

    def out(self) -> PaymentOut:
        return PaymentOut(
            payment_id=self.payment_id,
            order_id=self.order_id,
            amount_cny=self.amount_cny,
            status="refunded" if self.status == "refunded" else "succeeded",
        )


@dataclass(slots=True)
class Booking:
    booking_id: str
    flight_id: str
    passenger: str
    order_id: str
    amount_cny: int
    status: str = "held"

    def out(self) -> BookingOut:
        return BookingOut(
            booking_id=self.booking_id,
            flight_id=self.flight_id,
            passenger=self.passenger,
            status=self.status,  # type: ignore[arg-type]
            order_id=self.order_id,
            amount_due_cny=self.amount_cny,
        )


@dataclass(slots=True)
class RoomBooking:
    booking_id: str
    room_id: str
    date: dt.date
    hours: tuple[int, ...]
    organizer: str
    title: str
    status: str = "confirmed"


def _history(order: HistoricalOrder) -> Order:
    paid = order.status in ("paid", "shipped", "delivered")
    return Order(
        order_id=order.order_id,
        kind="goods",
        customer=order.customer,
        created=order.created,
        lines=order.lines,
        total_cny=order.total_cny,
        status=order.status,
        tracking=order.tracking,
        prepaid_cny=order.total_cny if paid else 0,
    )


class World:
    """One running world: serve it with ``create_world_app(world)`` or ``serve_world``.

    ``seed`` picks the data (and, unless ``fault_seed`` is given, the fault stream).
    ``latency_scale`` multiplies every injected delay and ``Retry-After`` (0 for unit
    tests, 1 for benchmarks). ``clock`` (monotonic seconds) times the time-based
    windows; ``sleep`` performs the delays. ``data`` replaces the seed's data (its own
    ``seed`` then counts). Thread-safe for readers on other threads.
    """

    def __init__(
        self,
        *,
        seed: int = DEFAULT_SEED,
        profile: str | Path | WorldFaultProfile = "none",
        latency_scale: float = 1.0,
        fault_seed: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        data: WorldData | None = None,
    ) -> None:
        self.data = data if data is not None else load_world(seed)
        self.seed = self.data.seed
        self.profile = load_profile(profile)
        scale = require_finite("latency_scale", latency_scale)
        if scale < 0.0:
            raise ConfigurationError("latency_scale", latency_scale, "must be >= 0")
        self.latency_scale = scale
        self._clock = clock
        self._sleep = sleep
        self.lock = threading.RLock()
        self.recorder = Recorder(clock, self.lock)
        self._cities = self._index_cities(self.data.cities)
        self.weather_by_key = {(w.city, w.date): w for w in self.data.weather}
        self.flights_by_id = {f.flight_id: f for f in self.data.flights}
        self.rooms_by_id = {r.room_id: r for r in self.data.rooms}
        self.closed = {(c.room_id, c.date) for c in self.data.closures}
        reserved: dict[tuple[str, dt.date], set[int]] = {}
        for r in self.data.reservations:
            reserved.setdefault((r.room_id, r.date), set()).add(int(r.start[:2]))
        self.reserved = {k: frozenset(v) for k, v in reserved.items()}
        self.reset(fault_seed=fault_seed if fault_seed is not None else self.seed)

    @staticmethod
    def _index_cities(cities: tuple[City, ...]) -> dict[str, City]:
        index: dict[str, City] = {}
        for c in cities:
            index[c.name] = c
            index[c.name_en.casefold()] = c
            index[c.code.casefold()] = c
        return index

    # --- episodes and ground truth --------------------------------------------------

    def reset(self, *, fault_seed: int | None = None) -> None:
        """Start a new episode: fresh state, counters and logs; optionally new fault draws."""
        with self.lock:
            if fault_seed is not None:
                if isinstance(fault_seed, bool) or not isinstance(fault_seed, int):
                    raise ConfigurationError("fault_seed", fault_seed, "must be an int")
                self.fault_seed = fault_seed
                self.planner = FaultPlanner(self.profile, fault_seed)
            self.recorder.reset()
            self.seats = {f.flight_id: f.seats for f in self.data.flights}
            self.stock = {p.sku: p.stock for p in self.data.products}
            self.orders: dict[str, Order] = {o.order_id: _history(o) for o in self.data.orders}
            self.payments: dict[str, Payment] = {}
            self.bookings: dict[str, Booking] = {}
            self.room_bookings: dict[str, RoomBooking] = {}
            self._serials: dict[str, int] = {}

    def fault_log(
        self, endpoint: str | None = None, kind: WorldFaultKind | str | None = None
    ) -> tuple[WorldFaultEvent, ...]:
        """Every injected fault since the last reset, in order; optionally filtered."""
        return self.recorder.faults(endpoint, kind)

    def elapsed(self) -> float:
        """Seconds on the world's clock since the last reset: the time base of its logs."""
        return self.recorder.elapsed()

    def regime_changes(self) -> tuple[RegimeChange, ...]:
        """Ground truth of a profile with regimes: every regime change a request met since
        the last reset (which service, at which of its requests, when, from → to)."""
        return self.recorder.regime_changes()

    def counters(self) -> dict[str, EffectCounters]:
        """Per effect/compensation endpoint: calls, effects, duplicates, replays, ..."""
        return self.recorder.counters()

    def effects(self, endpoint: str | None = None) -> tuple[WorldEffectRecord, ...]:
        """Every change made to the world since the last reset, in order."""
        return self.recorder.effects(endpoint)

    def request_counts(self) -> dict[str, int]:
        """Requests received per endpoint since the last reset (faulted ones included)."""
        return self.recorder.request_counts()

    async def delay(self, seconds: float) -> None:
        """Sleep ``seconds`` × ``latency_scale`` (not at all when that is 0)."""
        if seconds > 0.0 and self.latency_scale > 0.0:
            await self._sleep(seconds * self.latency_scale)

    def next_id(self, prefix: str) -> str:
        """The next id with ``prefix`` (``BK-000001``): deterministic per episode."""
        n = self._serials.get(prefix, 0) + 1
        self._serials[prefix] = n
        return f"{prefix}-{n:06d}"

    # --- shared checks --------------------------------------------------------------

    def city(self, query: str) -> City | None:
        """The city named exactly ``query`` (Chinese name, English name or code), if any.

        Typos (北就) and abbreviations (京) are *not* resolved: that is the caller's job.
        """
        q = query.strip()
        return self._cities.get(q) or self._cities.get(q.casefold())

    @staticmethod
    def parse_date(text: str, argument: str = "date") -> dt.date | Failure:
        if not _DATE.match(text.strip()):
            return fail(422, "invalid_date", f"{argument}={text!r}: expected YYYY-MM-DD")
        try:
            return dt.date.fromisoformat(text.strip())
        except ValueError:
            return fail(422, "invalid_date", f"{argument}={text!r} is not a calendar date")

    def unknown_city(self, query: str, argument: str) -> Failure:
        return fail(
            404,
            "unknown_city",
            f"{argument}={query!r}: no such city; GET /cities lists the cities served",
            city=query,
        )

    def check_schedule_date(self, day: dt.date) -> Failure | None:
        d = self.data
        if day < d.schedule_from:
            return fail(422, "date_in_past", f"{day} is before today ({d.today})", today=d.today)
        if day > d.schedule_to:
            return fail(
                404,
                "no_schedule_for_date",
                f"nothing is scheduled for {day}",
                available_from=d.schedule_from,
                available_to=d.schedule_to,
            )
        return None

    # --- orders and payments (shared by flights and goods) ----------------------------

    def paid_cny(self, order: Order) -> int:
        active = (self.payments[p] for p in order.payments)
        return order.prepaid_cny + sum(p.amount_cny for p in active if p.status == "succeeded")

    def order_out(self, order: Order) -> OrderOut:
        return order.out(self.paid_cny(order))

    def pay(
        self,
        endpoint: str,
        order_id: str,
        amount_cny: int | None,
        *,
        request_id: str,
        idempotency_key: str | None,
    ) -> PaymentOut | Failure:
        """Charge an order. A paid order is charged *again* (recorded as a duplicate)."""
        with self.lock:
            order = self.orders.get(order_id)
            if order is None:
                return fail(404, "unknown_order", f"order_id={order_id!r}: no such order")
            if order.status == "cancelled":
                return fail(409, "order_cancelled", f"order {order_id} is cancelled")
            if amount_cny is not None and amount_cny != order.total_cny:
                return fail(
                    422,
                    "amount_mismatch",
                    f"amount_cny={amount_cny} but the order's total is {order.total_cny}",
                    total_cny=order.total_cny,
                )
            duplicate = self.paid_cny(order) > 0
            payment = Payment(self.next_id("PAY"), order_id, order.total_cny)
            self.payments[payment.payment_id] = payment
            order.payments.append(payment.payment_id)
            if order.status == "created":
                order.status = "paid"
            if order.booking_id is not None:
                self.bookings[order.booking_id].status = "confirmed"
            self.recorder.record_effect(
                endpoint,
                order_id,
                duplicate=duplicate,
                request_id=request_id,
                idempotency_key=idempotency_key,
            )
            return payment.out()

    def refund_all(self, order: Order) -> list[PaymentOut]:
        refunds = []
        for pid in order.payments:
            payment = self.payments[pid]
            if payment.status == "succeeded":
                payment.status = "refunded"
                refunds.append(payment.out())
        return refunds

    def refund(
        self, payment_id: str, *, request_id: str, idempotency_key: str | None
    ) -> PaymentOut | Failure:
        """Refund one payment (e.g. a duplicate charge)."""
        with self.lock:
            payment = self.payments.get(payment_id)
            if payment is None:
                return fail(404, "unknown_payment", f"payment_id={payment_id!r}: no such payment")
            if payment.status == "refunded":
                return fail(409, "already_refunded", f"payment {payment_id} is already refunded")
            payment.status = "refunded"
            order = self.orders[payment.order_id]
            if order.status == "paid" and self.paid_cny(order) == 0:
                order.status = "created"
                if order.booking_id is not None:
                    self.bookings[order.booking_id].status = "held"
            self.recorder.record_effect(
                "payments_refund",
                payment_id,
                duplicate=False,
                request_id=request_id,
                idempotency_key=idempotency_key,
            )
            return payment.out()

    def new_order(
        self, kind: str, customer: str, lines: tuple[OrderLine, ...], booking_id: str | None = None
    ) -> Order:
        order = Order(
            order_id=self.next_id("ORD"),
            kind=kind,
            customer=customer,
            created=self.data.today,
            lines=lines,
            total_cny=sum(line.quantity * line.unit_price_cny for line in lines),
            status="created",
            booking_id=booking_id,
        )
        self.orders[order.order_id] = order
        return order

    def free_hours(self, room_id: str, day: dt.date) -> list[int] | None:
        """The room's free whole hours on ``day``; None when it is closed (weekend, repairs)."""
        if day.weekday() >= 5 or (room_id, day) in self.closed:
            return None
        with self.lock:
            taken = set(self.reserved.get((room_id, day), frozenset()))
            for b in self.room_bookings.values():
                if b.room_id == room_id and b.date == day and b.status == "confirmed":
                    taken.update(b.hours)
        return [h for h in range(*OPEN_HOURS) if h not in taken]
