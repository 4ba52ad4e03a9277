"""Ground truth computed from the world's data, the way the services compute their answers.

The task generator asks these questions of ``WorldData`` directly (never of a server), so
a task's truth is a computation on the shipped files, and a test that plays the ideal
trajectory against a real server checks that both agree.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from ..world import City, Company, Document, Flight, Room, WeatherDay, WorldData

__all__ = ["METRICS", "OPEN_HOURS", "RAIN", "Truth"]

OPEN_HOURS = (9, 18)  # the world books rooms in whole hours from 09:00 to 18:00, weekdays
RAIN = frozenset({"light_rain", "rain", "thunderstorm"})
"""Conditions that count as a rainy day (小雨, 中雨, 雷阵雨)."""

# metric field -> (Chinese, English) names used in prompts
METRICS: dict[str, tuple[str, str]] = {
    "revenue_mcny": ("营业收入", "revenue"),
    "net_profit_mcny": ("净利润", "net profit"),
    "gross_margin_pct": ("毛利率", "gross margin"),
    "operating_cash_flow_mcny": ("经营活动现金流量净额", "operating cash flow"),
    "revenue_yoy_pct": ("营业收入同比增长率", "year-on-year revenue growth"),
}


@dataclass(frozen=True)
class Truth:
    """Questions about one world's data, answered as its services would answer them."""

    data: WorldData

    @cached_property
    def cities(self) -> dict[str, City]:
        return {c.name: c for c in self.data.cities}

    @cached_property
    def by_code(self) -> dict[str, City]:
        return {c.code: c for c in self.data.cities}

    @cached_property
    def _weather(self) -> dict[tuple[str, dt.date], WeatherDay]:
        return {(w.city, w.date): w for w in self.data.weather}

    @cached_property
    def _flights(self) -> dict[tuple[str, str, dt.date], list[Flight]]:
        out: dict[tuple[str, str, dt.date], list[Flight]] = {}
        for f in self.data.flights:
            out.setdefault((f.origin, f.destination, f.date), []).append(f)
        return {k: sorted(v, key=lambda f: f.depart_time) for k, v in out.items()}

    @cached_property
    def routes(self) -> frozenset[tuple[str, str]]:
        """(origin code, destination code) pairs that have flights."""
        return frozenset((f.origin, f.destination) for f in self.data.flights)

    @cached_property
    def _reserved(self) -> dict[tuple[str, dt.date], frozenset[int]]:
        out: dict[tuple[str, dt.date], set[int]] = {}
        for r in self.data.reservations:
            out.setdefault((r.room_id, r.date), set()).add(int(r.start[:2]))
        return {k: frozenset(v) for k, v in out.items()}

    @cached_property
    def _closed(self) -> frozenset[tuple[str, dt.date]]:
        return frozenset((c.room_id, c.date) for c in self.data.closures)

    @cached_property
    def companies(self) -> dict[str, Company]:
        return {c.company_id: c for c in self.data.companies}

    @cached_property
    def _documents(self) -> dict[tuple[str, str], Document]:
        return {(d.company_id, d.quarter): d for d in self.data.documents}

    @cached_property
    def quarters(self) -> tuple[str, ...]:
        return tuple(sorted({d.quarter for d in self.data.documents}))

    # --- calendar ---------------------------------------------------------------------

    @property
    def today(self) -> dt.date:
        return self.data.today

    def weather_days(self) -> list[dt.date]:
        d = self.data
        return [
            d.weather_from + dt.timedelta(days=i)
            for i in range((d.weather_to - d.weather_from).days + 1)
        ]

    def schedule_days(self) -> list[dt.date]:
        d = self.data
        return [
            d.schedule_from + dt.timedelta(days=i)
            for i in range((d.schedule_to - d.schedule_from).days + 1)
        ]

    # --- answers ----------------------------------------------------------------------

    def weather(self, city: str, day: dt.date) -> WeatherDay | None:
        return self._weather.get((city, day))

    def flights(self, origin: str, destination: str, day: dt.date) -> list[Flight]:
        """The flights ``GET /flights`` lists (codes in, departure order out)."""
        return list(self._flights.get((origin, destination, day), []))

    @staticmethod
    def cheapest(flights: Sequence[Flight], budget: int | None = None) -> list[Flight]:
        """Every flight tied at the lowest price among those with seats (within budget)."""
        pool = [f for f in flights if f.seats > 0 and (budget is None or f.price_cny <= budget)]
        if not pool:
            return []
        low = min(f.price_cny for f in pool)
        return [f for f in pool if f.price_cny == low]

    def free_hours(self, room_id: str, day: dt.date) -> list[int] | None:
        """A room's free whole hours on a day before any booking; None when it is closed."""
        if day.weekday() >= 5 or (room_id, day) in self._closed:
            return None
        taken = self._reserved.get((room_id, day), frozenset())
        return [h for h in range(*OPEN_HOURS) if h not in taken]

    def rooms(
        self, day: dt.date | None = None, capacity: int | None = None, equipment: str | None = None
    ) -> list[Room]:
        """The rooms ``GET /rooms`` lists: big enough, equipped, with a free slot on ``day``."""
        out = []
        for room in sorted(self.data.rooms, key=lambda r: (r.capacity, r.room_id)):
            if capacity is not None and room.capacity < capacity:
                continue
            if equipment is not None and equipment not in room.equipment:
                continue
            if day is not None and not self.free_hours(room.room_id, day):
                continue
            out.append(room)
        return out

    def document(self, company_id: str, quarter: str) -> Document | None:
        return self._documents.get((company_id, quarter))
