"""Request and response bodies of the world's HTTP services (pydantic: they cross HTTP)."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from ._data import OrderLine, Tracking

__all__ = [
    "BookingCancelOut",
    "BookingOut",
    "BookingRequest",
    "CityList",
    "CityOut",
    "DocumentList",
    "DocumentOut",
    "DocumentSummary",
    "EffectCounters",
    "FlightList",
    "FlightOut",
    "Health",
    "OrderCancelOut",
    "OrderItemIn",
    "OrderList",
    "OrderOut",
    "OrderRequest",
    "PaymentOut",
    "PaymentRequest",
    "Problem",
    "ProductList",
    "ProductOut",
    "RoomBookingOut",
    "RoomBookingRequest",
    "RoomList",
    "RoomOut",
    "RoomSlots",
    "Slot",
    "WeatherReport",
    "WorldEffectRecord",
]

Name = Annotated[str, Field(min_length=1, max_length=200)]


class _Out(BaseModel):
    model_config = ConfigDict(frozen=True)


class _In(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Problem(_Out):
    """An error answer: a stable machine code, a sentence, and optional context."""

    model_config = ConfigDict(frozen=True, extra="allow")
    error: str
    detail: str


class Health(_Out):
    status: Literal["ok"] = "ok"
    seed: int
    fault_seed: int
    profile: str
    latency_scale: float
    today: dt.date
    weather_from: dt.date
    weather_to: dt.date
    schedule_from: dt.date
    schedule_to: dt.date


class CityOut(_Out):
    name: str
    name_en: str
    code: str
    abbreviation: str | None


class CityList(_Out):
    cities: list[CityOut]
    count: int


class WeatherReport(_Out):
    city: str
    city_en: str
    date: dt.date
    temperature_c: float
    temp_min_c: float
    temp_max_c: float
    condition: str
    condition_zh: str
    humidity_pct: int
    wind_kph: int
    precipitation_mm: float


class FlightOut(_Out):
    flight_id: str
    flight_no: str
    airline: str
    origin: str
    origin_code: str
    destination: str
    destination_code: str
    date: dt.date
    depart_time: str
    arrive_time: str
    duration_min: int
    price_cny: int
    seats_left: int


class FlightList(_Out):
    origin: str
    destination: str
    date: dt.date
    flights: list[FlightOut]
    count: int


class BookingRequest(_In):
    flight_id: Name
    passenger: Name


class BookingOut(_Out):
    booking_id: str
    flight_id: str
    passenger: str
    status: Literal["held", "confirmed", "cancelled"]
    order_id: str
    amount_due_cny: int


class PaymentRequest(_In):
    order_id: Name
    amount_cny: int | None = Field(
        default=None,
        description="If given, must equal the amount due (a guard against stale totals).",
    )


class PaymentOut(_Out):
    payment_id: str
    order_id: str
    amount_cny: int
    status: Literal["succeeded", "refunded"]


class BookingCancelOut(_Out):
    booking: BookingOut
    refunds: list[PaymentOut]


class RoomOut(_Out):
    room_id: str
    name: str
    name_en: str
    floor: int
    capacity: int
    equipment: list[str]
    free_slot_count: int | None = None


class RoomList(_Out):
    date: dt.date | None
    min_capacity: int | None
    rooms: list[RoomOut]
    count: int


class Slot(_Out):
    start: str
    end: str


class RoomSlots(_Out):
    room_id: str
    date: dt.date
    open: bool
    free_slots: list[Slot]


class RoomBookingRequest(_In):
    date: dt.date
    start: Annotated[str, Field(pattern=r"^\d{2}:00$")]
    end: Annotated[str, Field(pattern=r"^\d{2}:00$")]
    organizer: Name
    title: Annotated[str, Field(max_length=200)] = ""


class RoomBookingOut(_Out):
    booking_id: str
    room_id: str
    date: dt.date
    start: str
    end: str
    organizer: str
    title: str
    status: Literal["confirmed", "cancelled"]


class ProductOut(_Out):
    sku: str
    name: str
    name_en: str
    price_cny: int
    stock: int


class ProductList(_Out):
    products: list[ProductOut]
    count: int


class OrderItemIn(_In):
    sku: Name
    quantity: Annotated[int, Field(ge=1, le=100)]


class OrderRequest(_In):
    customer: Name
    items: Annotated[list[OrderItemIn], Field(min_length=1, max_length=20)]


class OrderOut(_Out):
    order_id: str
    kind: Literal["goods", "flight"]
    customer: str
    created: dt.date
    lines: list[OrderLine]
    total_cny: int
    paid_cny: int
    status: Literal["created", "paid", "shipped", "delivered", "cancelled"]
    tracking: Tracking | None = None


class OrderList(_Out):
    orders: list[OrderOut]
    count: int


class OrderCancelOut(_Out):
    order: OrderOut
    refunds: list[PaymentOut]


class DocumentSummary(_Out):
    doc_id: str
    company: str
    company_en: str
    ticker: str
    quarter: str
    title: str
    language: Literal["zh", "en"]


class DocumentList(_Out):
    documents: list[DocumentSummary]
    count: int


class DocumentOut(DocumentSummary):
    text: str
    format: Literal["ocr_text"] = "ocr_text"


class EffectCounters(_Out):
    """What one effect or compensation endpoint did, as ground truth.

    ``calls``: requests received (faulted ones included); ``faulted``: answered by an
    injected fault without running; ``effects``: changes made; ``distinct_effects``:
    changes to distinct targets; ``duplicates``: ``effects - distinct_effects`` (the same
    target changed again, e.g. an order charged twice); ``replays``: answered from the
    idempotency store; ``missing_idempotency_key``: requests sent without one;
    ``rejected``: refused with a 4xx; ``commit_then_fail``: effects made whose answer
    was replaced by an injected error.
    """

    calls: int = 0
    faulted: int = 0
    effects: int = 0
    distinct_effects: int = 0
    duplicates: int = 0
    replays: int = 0
    missing_idempotency_key: int = 0
    rejected: int = 0
    commit_then_fail: int = 0


class WorldEffectRecord(_Out):
    """One change made to the world: which request, which endpoint, which target."""

    request_id: str
    endpoint: str
    target: str
    duplicate: bool
    idempotency_key: str | None
    t_s: float
