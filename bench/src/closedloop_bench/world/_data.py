"""The world's data: frozen records, the shipped JSON files and loading by seed.

Everything here is ground truth. The HTTP services serve a view of it (with faults on
top); checkers read it directly, so a task's right answer never depends on the server.
The files under ``data/`` are ``generate_world(DEFAULT_SEED)`` written by
``scripts/gen_world_data.py``; any other seed is generated on the fly (milliseconds).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from functools import cache
from importlib import resources
from typing import Literal

from pydantic import BaseModel, ConfigDict

from closedloop._exceptions import ConfigurationError

__all__ = [
    "DATA_FILES",
    "DEFAULT_SEED",
    "City",
    "Company",
    "Document",
    "Figures",
    "Flight",
    "HistoricalOrder",
    "OrderLine",
    "Product",
    "Room",
    "RoomClosure",
    "RoomReservation",
    "Tracking",
    "WeatherDay",
    "WorldData",
    "load_world",
    "world_from_files",
    "world_to_files",
]

DEFAULT_SEED = 0


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class City(_Record):
    """A city the services know. ``typos`` are known misspellings the server rejects."""

    name: str
    name_en: str
    code: str
    abbreviation: str | None
    typos: tuple[str, ...] = ()


class WeatherDay(_Record):
    """One city's weather on one date."""

    city: str
    date: dt.date
    temperature_c: float
    temp_min_c: float
    temp_max_c: float
    condition: str
    condition_zh: str
    humidity_pct: int
    wind_kph: int
    precipitation_mm: float


class Flight(_Record):
    """One scheduled flight on one date; ``origin``/``destination`` are city codes."""

    flight_id: str
    flight_no: str
    airline: str
    origin: str
    destination: str
    date: dt.date
    depart_time: str
    arrive_time: str
    duration_min: int
    price_cny: int
    seats: int


class Room(_Record):
    """A meeting room."""

    room_id: str
    name: str
    name_en: str
    floor: int
    capacity: int
    equipment: tuple[str, ...]


class RoomReservation(_Record):
    """A slot already taken before the world starts (``start``/``end`` as HH:MM)."""

    room_id: str
    date: dt.date
    start: str
    end: str
    title: str


class RoomClosure(_Record):
    """A room that cannot be booked at all on a date."""

    room_id: str
    date: dt.date
    reason: str


class Product(_Record):
    """A product that can be ordered."""

    sku: str
    name: str
    name_en: str
    price_cny: int
    stock: int


class OrderLine(_Record):
    sku: str
    quantity: int
    unit_price_cny: int


class Tracking(_Record):
    carrier: str
    tracking_no: str
    eta: dt.date | None


class HistoricalOrder(_Record):
    """An order that exists before the world starts (for order-status tasks)."""

    order_id: str
    customer: str
    created: dt.date
    lines: tuple[OrderLine, ...]
    total_cny: int
    status: Literal["created", "paid", "shipped", "delivered", "cancelled"]
    tracking: Tracking | None = None


class Company(_Record):
    company_id: str
    name: str
    name_en: str
    ticker: str


class Figures(_Record):
    """The clean quarterly figures a document reports (RMB million, percent)."""

    revenue_mcny: float
    net_profit_mcny: float
    gross_margin_pct: float
    operating_cash_flow_mcny: float
    revenue_yoy_pct: float


class Document(_Record):
    """A quarterly report as OCR text, with the clean text and figures beside it."""

    doc_id: str
    company_id: str
    quarter: str
    title: str
    language: Literal["zh", "en"]
    noise: Literal["clean", "light", "heavy"]
    corruptions: int
    text: str
    clean_text: str
    truth: Figures


class WorldData(_Record):
    """All the world's data for one seed."""

    seed: int
    today: dt.date
    weather_from: dt.date
    weather_to: dt.date
    schedule_from: dt.date
    schedule_to: dt.date
    cities: tuple[City, ...]
    unknown_cities: tuple[str, ...]
    weather: tuple[WeatherDay, ...]
    flights: tuple[Flight, ...]
    rooms: tuple[Room, ...]
    reservations: tuple[RoomReservation, ...]
    closures: tuple[RoomClosure, ...]
    products: tuple[Product, ...]
    orders: tuple[HistoricalOrder, ...]
    companies: tuple[Company, ...]
    documents: tuple[Document, ...]


# Which top-level fields go in which shipped file; small files diff and review better.
DATA_FILES: Mapping[str, tuple[str, ...]] = {
    "meta.json": (
        "seed",
        "today",
        "weather_from",
        "weather_to",
        "schedule_from",
        "schedule_to",
        "unknown_cities",
    ),
    "cities.json": ("cities",),
    "weather.json": ("weather",),
    "flights.json": ("flights",),
    "rooms.json": ("rooms", "reservations", "closures"),
    "shop.json": ("products", "orders"),
    "documents.json": ("companies", "documents"),
}


def world_to_files(data: WorldData) -> dict[str, str]:
    """The shipped files' exact text for ``data`` (one record per line: readable diffs)."""
    dumped = data.model_dump(mode="json")
    out: dict[str, str] = {}
    for filename, fields in DATA_FILES.items():
        parts = []
        for name in fields:
            value = dumped[name]
            if isinstance(value, list):
                rows = ",\n".join("  " + json.dumps(v, ensure_ascii=False) for v in value)
                parts.append(f"{json.dumps(name)}: [\n{rows}\n]")
            else:
                parts.append(f"{json.dumps(name)}: {json.dumps(value, ensure_ascii=False)}")
        out[filename] = "{\n" + ",\n".join(parts) + "\n}\n"
    return out


def world_from_files(files: Mapping[str, str]) -> WorldData:
    """Rebuild ``WorldData`` from the texts ``world_to_files`` wrote."""
    merged: dict[str, object] = {}
    for filename in DATA_FILES:
        if filename not in files:
            raise ConfigurationError("files", sorted(files), f"missing {filename}")
        merged.update(json.loads(files[filename]))
    return WorldData.model_validate(merged)


@cache
def _shipped() -> WorldData:
    folder = resources.files(__package__).joinpath("data")
    return world_from_files(
        {name: folder.joinpath(name).read_text(encoding="utf-8") for name in DATA_FILES}
    )


@cache
def _generated(seed: int) -> WorldData:
    from ._generate import generate_world

    return generate_world(seed)


def load_world(seed: int = DEFAULT_SEED) -> WorldData:
    """The world's data for ``seed``: the shipped files for the default seed, else generated."""
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ConfigurationError("seed", seed, "must be an int >= 0")
    return _shipped() if seed == DEFAULT_SEED else _generated(seed)
